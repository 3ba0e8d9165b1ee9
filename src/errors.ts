/**
 * An error caused by the environment or the user's input rather than by a bug: the CLI prints
 * its message as one line (no stack) and exits with code 2.
 *
 * @example
 * throw new UserError('postmaster not found: pid 4242 from pg_backend_pid() is not on this host');
 */
export class UserError extends Error {
  override readonly name = 'UserError';
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

/** The message of anything thrown, on one line. */
export function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.replace(/\s*\n\s*/g, ' | ').trim();
}

/** What node-postgres says when the server closed the connection or the socket broke. */
const CONNECTION_LOST = /^(Connection terminated|Client has encountered a connection error|Client was closed)/;
const SOCKET_ERRORS = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT']);

/**
 * The one line for a failure that came from the database rather than from us: the server's own
 * error (permissions, missing objects, shutdown), or a connection it closed or that broke (a
 * restart). Null for anything else.
 *
 * @example
 * databaseFailure(new Error('Connection terminated unexpectedly')); // 'lost the connection to PostgreSQL: Connection terminated unexpectedly'
 */
export function databaseFailure(error: unknown): string | null {
  if (typeof error !== 'object' || error === null) return null;
  if ('severity' in error && 'code' in error) return `PostgreSQL said: ${oneLine(error)}`;
  const code = (error as { code?: unknown }).code;
  if ((error instanceof Error && CONNECTION_LOST.test(error.message)) || (typeof code === 'string' && SOCKET_ERRORS.has(code))) {
    return `lost the connection to PostgreSQL: ${oneLine(error)}`;
  }
  return null;
}
