import { sql, type Kysely } from 'kysely';
import type pg from 'pg';
import type { BpfStatsDatabase } from '../storage/database.js';

/**
 * Closes this node's backend_stats rows that a previous run left open and whose process is gone
 * (not seen exiting). The live backends are read from the node's pg_stat_activity and compared
 * in the sink, which may be another server: rows of other nodes are never touched.
 *
 * @example
 * await markVanishedBackends(db, nodeClient);
 */
export async function markVanishedBackends(db: Kysely<BpfStatsDatabase>, node: pg.Client): Promise<void> {
  const { rows } = await node.query<{ pid: number; start: string }>(
    'SELECT pid, backend_start::text AS start FROM pg_stat_activity WHERE backend_start IS NOT NULL',
  );
  await db
    .updateTable('bpf_stats.backend_stats as b')
    .set((eb) => ({ exited_at: eb.ref('b.last_seen') }))
    .where('b.node', '=', sql<string>`current_setting('bpf_stats.node')`)
    .where('b.exited_at', 'is', null)
    .where(({ not, exists }) =>
      not(
        exists(
          sql`(SELECT 1 FROM unnest(${rows.map((r) => r.pid)}::int4[], ${rows.map((r) => r.start)}::timestamptz[]) AS a(pid, backend_start)
                WHERE a.pid = b.pid AND a.backend_start = b.backend_start)`,
        ),
      ),
    )
    // these never appear in pg_stat_activity
    .where('b.backend_type', 'not in', ['postmaster', 'postmaster child'])
    .execute();
}
