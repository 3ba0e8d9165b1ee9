import type pg from 'pg';

/**
 * The backend pid the server announced at connection start (BackendKeyData): known before the
 * connection runs anything, so the sidecar can leave its own backends out of the figures.
 *
 * @example
 * object.exclude(backendPid(client));
 */
export function backendPid(client: pg.ClientBase): number {
  const pid = (client as unknown as { processID?: number }).processID;
  if (!pid) throw new Error('the server did not send its backend pid (BackendKeyData)');
  return pid;
}
