import { hostname } from 'node:os';
import { sql, type Kysely } from 'kysely';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { CheckLine } from './probe-capabilities.js';

/**
 * Replaces this host's rows (of the node the session names) of bpf_stats.capabilities with `lines` (from probeCapabilities),
 * in one transaction, so readers never see a half-written set. A sink's node role holds no
 * DELETE there (it could then LOCK the table against every node, sql/95-sink-nodes.sql): its
 * old rows go through bpf_stats.node_delete, which deletes its own node's rows only.
 *
 * @example
 * await writeCapabilities(clientDatabase(client), await probeCapabilities({ support, loaded: true, pgStatStatementsMax: null }));
 */
export async function writeCapabilities(db: Kysely<BpfStatsDatabase>, lines: CheckLine[], host = hostname()): Promise<void> {
  await db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ direct: boolean }>`
      SELECT pg_catalog.has_table_privilege('bpf_stats.capabilities', 'DELETE') AS direct`.execute(tx);
    if (rows[0]!.direct) {
      await tx
        .deleteFrom('bpf_stats.capabilities')
        .where('node', '=', sql<string>`current_setting('bpf_stats.node')`)
        .where('host', '=', host)
        .execute();
    } else {
      await sql`
        SELECT bpf_stats.node_delete('bpf_stats.capabilities', ARRAY(
          SELECT c.ctid FROM bpf_stats.capabilities c WHERE c.node = current_setting('bpf_stats.node') AND c.host = ${host}))`.execute(tx);
    }
    if (!lines.length) return;
    await tx
      .insertInto('bpf_stats.capabilities')
      .values(lines.map((l) => ({ host, kind: l.kind, probe: l.probe, available: l.ok, required: l.required, reason: l.detail })))
      .execute();
  });
}
