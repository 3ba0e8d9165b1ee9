import { sql, type Kysely } from 'kysely';
import type { FlushBatch } from '../collect/flush-batch.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { metricArrays, metricColumnNames, usToTimestamp } from '../storage/stats-writer.js';

/**
 * Appends a flush's increments to the history tables: the same rows the flush adds to
 * query_stats / backend_stats, stamped with the transaction's now() (the rows' last_seen).
 * One INSERT ... SELECT FROM unnest(...) per table that has rows; run it inside the flush's
 * transaction so history and the cumulative tables never disagree.
 *
 * @example
 * await new StatsWriter(db).write(batch, (tx) => writeHistory(tx, batch));
 */
export async function writeHistory(tx: Kysely<BpfStatsDatabase>, batch: FlushBatch): Promise<void> {
  const metrics = sql.join(metricColumnNames().map((c) => sql.id(c)));
  if (batch.queries.length) {
    const rows = batch.queries;
    await sql`
      INSERT INTO bpf_stats.query_stats_history (ts, userid, dbid, toplevel, queryid, ${metrics})
      SELECT now(), u.* FROM unnest(
        ${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
        ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
        ${metricArrays(rows.map((r) => r.values))}) AS u`.execute(tx);
  }
  if (batch.backends.length) {
    const rows = batch.backends;
    await sql`
      INSERT INTO bpf_stats.backend_stats_history (ts, pid, backend_start, backend_type, datid, usesysid, queryid, ${metrics})
      SELECT now(), u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid,
             ${sql.join(metricColumnNames().map((c) => sql.ref(`u.${c}`)))}
        FROM unnest(
          ${rows.map((r) => r.pid)}::int4[], ${rows.map((r) => r.backendStartUs.toString())}::int8[],
          ${rows.map((r) => r.backendType)}::text[], ${rows.map((r) => r.datid)}::oid[],
          ${rows.map((r) => r.usesysid)}::oid[], ${rows.map((r) => r.queryid)}::int8[],
          ${metricArrays(rows.map((r) => r.values))})
          AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${metrics})`.execute(tx);
  }
}
