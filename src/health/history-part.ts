import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../flush/flush-part.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { METRIC_COLUMN_NAMES, metricArrays, metricColumnList, usToTimestamp } from '../storage/metric-arrays.js';
import type { MetricRowSet } from '../storage/metric-row.js';
import type { MetricRows } from '../storage/metric-rows.js';

/**
 * The history tables' part of a flush: the same rows the flush adds to query_stats /
 * backend_stats, stamped with the transaction's now() (the rows' last_seen), in the same
 * statement, so history always sums to the cumulative tables. Commits nothing of its own.
 *
 * @example
 * new FlushWriter(db, [queryStats, backendStats, new HistoryPart(db, rows), health]);
 */
export class HistoryPart implements FlushPart {
  readonly name = 'history';

  constructor(
    private readonly db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
  ) {}

  prepare({ maps, measured }: FlushInput): PreparedPart {
    // History only ever goes along with the cumulative rows it mirrors.
    return { statements: historyInserts(this.db, this.rows.prepare(maps, measured)), commit: () => undefined, companion: true };
  }
}

/** One INSERT ... SELECT FROM unnest(...) per history table that has rows. */
function historyInserts(db: Kysely<BpfStatsDatabase>, batch: MetricRowSet): RawBuilder<unknown>[] {
  const metrics = metricColumnList();
  const statements: RawBuilder<unknown>[] = [];
  if (batch.queries.length) {
    const rows = batch.queries;
    const insert = db
      .insertInto('bpf_stats.query_stats_history')
      .columns(['ts', 'userid', 'dbid', 'toplevel', 'queryid', ...METRIC_COLUMN_NAMES])
      .expression(
        sql`SELECT now(), u.* FROM unnest(
              ${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
              ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
              ${metricArrays(rows.map((r) => r.values))}) AS u`,
      );
    statements.push(sql`${insert}`);
  }
  if (batch.backends.length) {
    const rows = batch.backends;
    const insert = db
      .insertInto('bpf_stats.backend_stats_history')
      .columns(['ts', 'pid', 'backend_start', 'backend_type', 'datid', 'usesysid', 'queryid', ...METRIC_COLUMN_NAMES])
      .expression(
        sql`SELECT now(), u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid,
             ${metricColumnList('u')}
        FROM unnest(
          ${rows.map((r) => r.pid)}::int4[], ${rows.map((r) => r.backendStartUs.toString())}::int8[],
          ${rows.map((r) => r.backendType)}::text[], ${rows.map((r) => r.datid)}::oid[],
          ${rows.map((r) => r.usesysid)}::oid[], ${rows.map((r) => r.queryid)}::int8[],
          ${metricArrays(rows.map((r) => r.values))})
          AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${metrics})`,
      );
    statements.push(sql`${insert}`);
  }
  return statements;
}
