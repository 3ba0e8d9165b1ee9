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
