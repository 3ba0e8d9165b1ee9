import pg from 'pg';
import { UserError, oneLine } from '../errors.js';

/**
 * Opens a connection from a DSN, or from the libpq PG* environment variables when the DSN is
 * undefined. A failure is a UserError naming where it tried to connect.
 */
export async function connect(connectionString: string | undefined, applicationName = 'pg-bpf-stats'): Promise<pg.Client> {
  const client = new pg.Client({ connectionString, application_name: applicationName });
  // A socket that breaks (a server shutting down, even while we connect) is reported through the
  // promise of whatever call hits it; without a listener the 'error' event would kill the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    const where = connectionString ? redact(connectionString) : `PG* environment (${process.env.PGHOST ?? 'localhost'}:${process.env.PGPORT ?? 5432})`;
    throw new UserError(`cannot connect to PostgreSQL at ${where}: ${oneLine(error)}`);
  }
  return client;
}

/** A DSN without its password, for messages. */
export function redact(connectionString: string): string {
  return connectionString.replace(/(\/\/[^:/@]*):[^@]*@/, '$1:***@').replace(/(password=)\S+/i, '$1***');
}
