import { sql, type Kysely, type QueryCreator, type RawBuilder } from 'kysely';
import type { FlushBatch } from '../collect/flush-batch.js';
import { METRIC_COLUMNS, type MetricValue } from '../collect/metric-columns.js';
import type { BpfStatsDatabase } from './database.js';
import { histogramUpsert } from './histogram-writer.js';

const PG_TYPE: Record<'ns' | 'count', string> = { ns: 'float8[]', count: 'int8[]' };

/** One table's part of a flush: an INSERT that runs as a data-modifying CTE. */
type FlushPart = (qc: QueryCreator<BpfStatsDatabase>) => { toOperationNode(): unknown };

/**
 * Writes a flush as ONE statement: each table's rows are one INSERT ... SELECT FROM
 * unnest(...) ON CONFLICT, whatever their number, and the inserts are data-modifying CTEs of a
 * single statement, so the flush is atomic without BEGIN/COMMIT and costs one round trip
 * (on a loaded host each round trip of the sidecar costs ~1-2 ms of its CPU). Metric columns
 * accumulate; a NULL increment (a probe set that is off) leaves the stored value as it was.
 *
 * @example
 * const writer = new StatsWriter(db);
 * await writer.write(batch);
 */
export class StatsWriter {
  constructor(private readonly db: Kysely<BpfStatsDatabase>) {}

  /**
   * `more`: further statements of the same flush (history rows, the health row), run as more
   * data-modifying CTEs of the same statement; called just before it is sent.
   */
  async write(batch: FlushBatch, more?: () => RawBuilder<unknown>[]): Promise<{ queries: number; backends: number }> {
    const parts: Array<[string, FlushPart]> = [];
    if (batch.queries.length) parts.push(['query_rows', (qc) => this.writeQueries(qc, batch)]);
    if (batch.backends.length) parts.push(['backend_rows', (qc) => this.writeBackends(qc, batch)]);
    if (batch.histograms?.length) parts.push(['histogram_rows', () => sql`(${histogramUpsert(batch.histograms!)})`]);
    // kysely puts a raw CTE body in as it is: the parentheses are ours.
    (more?.() ?? []).forEach((statement, i) => parts.push([`more_${i}`, () => sql`(${statement})`]));
    // Nothing to write: no round trip at all.
    if (!parts.length) return { queries: 0, backends: 0 };
    let creator = this.db as unknown as QueryCreator<BpfStatsDatabase>;
    for (const [name, part] of parts) creator = creator.with(name, part as never) as unknown as QueryCreator<BpfStatsDatabase>;
    await creator.selectNoFrom(sql<number>`1`.as('flushed')).execute();
    return { queries: batch.queries.length, backends: batch.backends.length };
  }

  private writeQueries(qc: QueryCreator<BpfStatsDatabase>, batch: FlushBatch) {
    const rows = batch.queries;
    return qc
      .insertInto('bpf_stats.query_stats')
      .columns(['userid', 'dbid', 'toplevel', 'queryid', ...metricColumnNames(), 'last_seen'] as never)
      .expression(
        sql`SELECT u.*, now() FROM unnest(
              ${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
              ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
              ${metricArrays(rows.map((r) => r.values))}) AS u`,
      )
      .onConflict((oc) =>
        oc.columns(['userid', 'dbid', 'toplevel', 'queryid']).doUpdateSet(accumulate('bpf_stats.query_stats', { last_seen: sql`excluded.last_seen` })),
      );
  }

  private writeBackends(qc: QueryCreator<BpfStatsDatabase>, batch: FlushBatch) {
    const rows = batch.backends;
    const timestamps = (values: Array<bigint | null>) => values.map((v) => (v === null ? null : v.toString()));
    return qc
      .insertInto('bpf_stats.backend_stats')
      .columns([
        'pid', 'backend_start', 'backend_type', 'datid', 'usesysid', 'queryid', ...metricColumnNames(), 'last_seen', 'exited_at',
      ] as never)
      .expression(
        sql`SELECT u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid,
                   ${sql.join(metricColumnNames().map((c) => sql.ref(`u.${c}`)))},
                   now(), ${usToTimestamp(sql`u.exited_us`)}
              FROM unnest(
                ${rows.map((r) => r.pid)}::int4[], ${timestamps(rows.map((r) => r.backendStartUs))}::int8[],
                ${rows.map((r) => r.backendType)}::text[], ${rows.map((r) => r.datid)}::oid[],
                ${rows.map((r) => r.usesysid)}::oid[], ${rows.map((r) => r.queryid)}::int8[],
                ${metricArrays(rows.map((r) => r.values))}, ${timestamps(rows.map((r) => r.exitedAtUs))}::int8[])
                AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${sql.join(metricColumnNames().map((c) => sql.id(c)))}, exited_us)`,
      )
      .onConflict((oc) =>
        oc.columns(['pid', 'backend_start']).doUpdateSet(
          accumulate('bpf_stats.backend_stats', {
            backend_type: sql`excluded.backend_type`,
            datid: sql`coalesce(excluded.datid, bpf_stats.backend_stats.datid)`,
            usesysid: sql`coalesce(excluded.usesysid, bpf_stats.backend_stats.usesysid)`,
            queryid: sql`coalesce(excluded.queryid, bpf_stats.backend_stats.queryid)`,
            last_seen: sql`excluded.last_seen`,
            exited_at: sql`coalesce(excluded.exited_at, bpf_stats.backend_stats.exited_at)`,
          }),
        ),
      );
  }
}

export function metricColumnNames(): string[] {
  return METRIC_COLUMNS.map((c) => c.column);
}

/** One array parameter per metric column, cast to its column type. */
export function metricArrays(rows: MetricValue[][]): RawBuilder<unknown> {
  return sql.join(
    METRIC_COLUMNS.map((c, i) => {
      const values = rows.map((v) => {
        const value = v[i];
        return typeof value === 'bigint' ? value.toString() : (value ?? null);
      });
      return sql`${values}::${sql.raw(PG_TYPE[c.unit])}`;
    }),
  );
}

/** SET col = stored + increment for every metric column; NULL increments keep the stored value. */
function accumulate(table: string, extra: Record<string, RawBuilder<unknown>>): never {
  const set: Record<string, RawBuilder<unknown>> = {};
  for (const { column } of METRIC_COLUMNS) {
    const stored = sql.ref(`${table}.${column}`);
    const increment = sql.ref(`excluded.${column}`);
    set[column] = sql`CASE WHEN ${increment} IS NULL THEN ${stored} ELSE coalesce(${stored}, 0) + ${increment} END`;
  }
  return { ...set, ...extra } as never;
}

export function usToTimestamp(us: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`timestamptz 'epoch' + ${us} * interval '1 microsecond'`;
}
