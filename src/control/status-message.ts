import type pg from 'pg';

/** A status message on bpf_stats_status, once its request's row confirms it. */
export interface StatusMessage {
  id: string;
  status: string;
  error: string | null;
}

/**
 * Tells a bpf_stats_status message from a forgery. Any role that can connect may NOTIFY any
 * channel, so the payload is only a hint: the collector changes the request's row in
 * bpf_stats.collections (which only its role can write) before, or in the same statement as, it
 * notifies, so a true message names a row that says the same status. Returns the row's view of
 * the message, or null for a payload that is malformed, names no row, or names a status the row
 * does not have (forged, or overtaken by a later change: read the row).
 *
 * @example
 * client.on('notification', async (n) => {
 *   const status = n.channel === 'bpf_stats_status' ? await verifiedStatus(client, n.payload) : null;
 * });
 */
export async function verifiedStatus(client: Pick<pg.Client, 'query'>, payload: string | undefined): Promise<StatusMessage | null> {
  if (payload === undefined || payload.length > 8000) return null;
  let message: unknown;
  try {
    message = JSON.parse(payload);
  } catch {
    return null;
  }
  const { id, status } = (message ?? {}) as { id?: unknown; status?: unknown };
  if (
    !((typeof id === 'number' && Number.isSafeInteger(id)) || (typeof id === 'string' && /^\d{1,19}$/.test(id))) ||
    typeof status !== 'string'
  )
    return null;
  const { rows } = await client.query<{ id: string; status: string; error: string | null }>(
    'SELECT c.id::text AS id, c.status, c.error FROM bpf_stats.collections c WHERE c.id = $1::int8 AND c.status = $2',
    [String(id), status],
  );
  return rows[0] ?? null;
}
