import type pg from 'pg';

/** This process's collector's map_fill entry for `map`, as its last flush wrote it. */
export async function mapFill(
  admin: pg.Client,
  map: string,
): Promise<{ entries: number; max_entries: number; overflowed?: number; evicted?: number }> {
  const { rows } = await admin.query(`SELECT map_fill -> $1 AS fill FROM bpf_stats.health WHERE pid = $2 AND stopped_at IS NULL`, [
    map,
    process.pid,
  ]);
  if (rows.length !== 1) throw new Error(`expected one running collector of pid ${process.pid} in bpf_stats.health, found ${rows.length}`);
  if (!rows[0].fill) throw new Error(`no map_fill entry for ${map}`);
  return rows[0].fill;
}
