import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { FlushBatch } from '../collect/flush-batch.js';
import { METRIC_COLUMNS, type MetricValue } from '../collect/metric-columns.js';
import type { BpfStatsDatabase } from './database.js';
import { writeHistograms } from './histogram-writer.js';

const PG_TYPE: Record<'ns' | 'count', string> = { ns: 'float8[]', count: 'int8[]' };

/**
 * Writes a flush: one INSERT ... SELECT FROM unnest(...) ON CONFLICT statement per table that
 * has rows, whatever their number, inside one transaction. Metric columns accumulate; a NULL
 * increment (a probe set that is off) leaves the stored value as it was.
 *
 * @example
 * const writer = new StatsWriter(db);
 * await writer.write(batch);
 */
export class StatsWriter {
  constructor(private readonly db: Kysely<BpfStatsDatabase>) {}

  async write(batch: FlushBatch): Promise<{ queries: number; backends: number }> {
    // Nothing changed since the last flush: no round trip at all.
    if (!batch.queries.length && !batch.backends.length && !batch.histograms?.length) return { queries: 0, backends: 0 };
    await this.db.transaction().execute(async (tx) => {
      if (batch.queries.length) await this.writeQueries(tx, batch);
      if (batch.backends.length) await this.writeBackends(tx, batch);
      if (batch.histograms?.length) await writeHistograms(tx, batch.histograms);
    });
    return { queries: batch.queries.length, backends: batch.backends.length };
  }

  private async writeQueries(tx: Kysely<BpfStatsDatabase>, batch: FlushBatch): Promise<void> {
    const rows = batch.queries;
    await tx
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
      )
      .execute();
  }

  private async writeBackends(tx: Kysely<BpfStatsDatabase>, batch: FlushBatch): Promise<void> {
    const rows = batch.backends;
    const timestamps = (values: Array<bigint | null>) => values.map((v) => (v === null ? null : v.toString()));
    await tx
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
      )
      .execute();
  }
}

function metricColumnNames(): string[] {
  return METRIC_COLUMNS.map((c) => c.column);
}

/** One array parameter per metric column, cast to its column type. */
function metricArrays(rows: MetricValue[][]): RawBuilder<unknown> {
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

function usToTimestamp(us: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`timestamptz 'epoch' + ${us} * interval '1 microsecond'`;
}
