import pg from 'pg';
import { UserError, oneLine } from '../errors.js';
import { clientConfig, redact } from './connection-string.js';
import { assertPinned, pinnedConfig } from './pinned-session.js';

export { clientConfig, redact };

/**
 * Opens a connection from a DSN, or from the libpq PG* environment variables when the DSN is
 * undefined. A failure is a UserError naming where it tried to connect.
 */
export async function connect(connectionString: string | undefined, applicationName = 'pg-bpf-stats'): Promise<pg.Client> {
  const client = new pg.Client(pinnedConfig({ ...clientConfig(connectionString), application_name: applicationName }));
  // A socket that breaks (a server shutting down, even while we connect) is reported through the
  // promise of whatever call hits it; without a listener the 'error' event would kill the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    const where = connectionString
      ? redact(connectionString)
      : `PG* environment (${process.env.PGHOST ?? 'localhost'}:${process.env.PGPORT ?? 5432})`;
    throw new UserError(`cannot connect to PostgreSQL at ${where}: ${oneLine(error)}`);
  }
  try {
    await assertPinned(client);
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
  return client;
}

/**
 * The control session holds the one-collector-per-server lock and the start's work between
 * long steps (loading BPF, finding the postmaster): a server's idle_session_timeout must not end
 * it. The collector's other sessions may time out; they reconnect on their own.
 */
export async function exemptFromIdleTimeout(client: pg.Client): Promise<void> {
  // pg_settings: a server without the setting (before 14) is refused later, with its version.
  await client.query(`SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'`);
}
