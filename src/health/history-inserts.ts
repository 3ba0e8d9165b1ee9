import { sql, type RawBuilder } from 'kysely';
import type { FlushBatch } from '../collect/flush-batch.js';
import { metricArrays, metricColumnNames, usToTimestamp } from '../storage/stats-writer.js';

/**
 * The INSERTs that append a flush's increments to the history tables: the same rows the flush
 * adds to query_stats / backend_stats, stamped with the transaction's now() (the rows'
 * last_seen). One INSERT ... SELECT FROM unnest(...) per table that has rows, returned as
 * statements to run as data-modifying CTEs of the flush's single statement (see StatsWriter),
 * so history always sums to the cumulative tables.
 *
 * @example
 * const inserts = historyInserts(batch); // 0 to 2 statements
 * await writer.write(batch, () => inserts);
 */
export function historyInserts(batch: FlushBatch): RawBuilder<unknown>[] {
  const metrics = sql.join(metricColumnNames().map((c) => sql.id(c)));
  const statements: RawBuilder<unknown>[] = [];
  if (batch.queries.length) {
    const rows = batch.queries;
    statements.push(sql`
      INSERT INTO bpf_stats.query_stats_history (ts, userid, dbid, toplevel, queryid, ${metrics})
      SELECT now(), u.* FROM unnest(
        ${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
        ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
        ${metricArrays(rows.map((r) => r.values))}) AS u`);
  }
  if (batch.backends.length) {
    const rows = batch.backends;
    statements.push(sql`
      INSERT INTO bpf_stats.backend_stats_history (ts, pid, backend_start, backend_type, datid, usesysid, queryid, ${metrics})
      SELECT now(), u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid,
             ${sql.join(metricColumnNames().map((c) => sql.ref(`u.${c}`)))}
        FROM unnest(
          ${rows.map((r) => r.pid)}::int4[], ${rows.map((r) => r.backendStartUs.toString())}::int8[],
          ${rows.map((r) => r.backendType)}::text[], ${rows.map((r) => r.datid)}::oid[],
          ${rows.map((r) => r.usesysid)}::oid[], ${rows.map((r) => r.queryid)}::int8[],
          ${metricArrays(rows.map((r) => r.values))})
          AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${metrics})`);
  }
  return statements;
}
