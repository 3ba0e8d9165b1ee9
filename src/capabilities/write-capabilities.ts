import { hostname } from 'node:os';
import { sql, type Kysely } from 'kysely';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { CheckLine } from './probe-capabilities.js';

/**
 * Replaces this host's rows (of the node the session names) of bpf_stats.capabilities with `lines` (from probeCapabilities),
 * in one transaction, so readers never see a half-written set.
 *
 * @example
 * await writeCapabilities(clientDatabase(client), await probeCapabilities({ support, loaded: true, pgStatStatementsMax: null }));
 */
export async function writeCapabilities(db: Kysely<BpfStatsDatabase>, lines: CheckLine[], host = hostname()): Promise<void> {
  await db.transaction().execute(async (tx) => {
    await tx
      .deleteFrom('bpf_stats.capabilities')
      .where('node', '=', sql<string>`current_setting('bpf_stats.node')`)
      .where('host', '=', host)
      .execute();
    if (!lines.length) return;
    await tx
      .insertInto('bpf_stats.capabilities')
      .values(lines.map((l) => ({ host, kind: l.kind, probe: l.probe, available: l.ok, required: l.required, reason: l.detail })))
      .execute();
  });
}
