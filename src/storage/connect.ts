import pg from 'pg';
import { UserError, oneLine } from '../errors.js';
import { assertPinned, pinnedConfig } from './pinned-session.js';

/**
 * Opens a connection from a DSN, or from the libpq PG* environment variables when the DSN is
 * undefined. A failure is a UserError naming where it tried to connect.
 */
export async function connect(connectionString: string | undefined, applicationName = 'pg-bpf-stats'): Promise<pg.Client> {
  if (connectionString !== undefined) checkConnectionString(connectionString);
  const client = new pg.Client(pinnedConfig({ connectionString, application_name: applicationName }));
  // A socket that breaks (a server shutting down, even while we connect) is reported through the
  // promise of whatever call hits it; without a listener the 'error' event would kill the process.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    const where = connectionString ? redact(connectionString) : `PG* environment (${process.env.PGHOST ?? 'localhost'}:${process.env.PGPORT ?? 5432})`;
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

/** A DSN without its password, for messages. */
export function redact(connectionString: string): string {
  return connectionString.replace(/(\/\/[^:/@]*):[^@]*@/, '$1:***@').replace(/(password=)\S+/i, '$1***');
}

/** key=value pairs as libpq reads them: a value is a word or single-quoted (with \\ escapes). */
const KEYWORD_VALUE = /^\s*(?:[A-Za-z_]+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']+)\s*)+$/;

/**
 * A DSN is a URI (postgresql://, postgres://), libpq key=value pairs, or a socket directory:
 * anything else would be read as a host name ("not a dsn" -> host "base") and fail later with a
 * message about DNS. Throws a UserError naming the forms.
 */
export function checkConnectionString(connectionString: string): void {
  const text = connectionString.trim();
  if (/^postgres(ql)?:\/\//i.test(text)) {
    try {
      new URL(text);
      return;
    } catch {
      throw new UserError(`--dsn ${JSON.stringify(redact(text))} is not a valid URI: expected postgresql://user@host:port/database`);
    }
  }
  if (text.startsWith('/') && !/\s/.test(text)) return;
  if (KEYWORD_VALUE.test(text)) return;
  throw new UserError(
    `--dsn ${JSON.stringify(redact(text))} is not a connection string: expected postgresql://user@host:port/database or key=value pairs (host=... dbname=...)`,
  );
}
