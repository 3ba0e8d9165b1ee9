import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../families/flush-part.js';
import { binaryArray } from '../storage/binary-array.js';
import { compiledAround } from './compiled-around.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { backendIdentityArrays, METRIC_COLUMN_NAMES, metricArrays, metricColumnList, usToTimestamp } from '../storage/metric-arrays.js';
import type { MetricRows } from './metric-rows.js';
import { accumulate } from './query-stats-part.js';

/**
 * bpf_stats.backend_stats' part of a flush: one upsert for all rows, metric columns
 * accumulating like query_stats'; identity columns keep what is known; an exited process gets
 * exited_at and is forgotten (its map entry deleted) once the flush is written. In a lazy
 * (periodic) flush, rows of quiet processes only go along with other data (PreparedMetricRows.backendsUrgent).
 *
 * @example
 * new FlushWriter(db, [new BackendStatsPart(db, rows), ...]);
 */
export class BackendStatsPart implements FlushPart {
  readonly name = 'backend_stats';

  private readonly upsert: (rows: RawBuilder<unknown>) => RawBuilder<unknown>;

  constructor(
    db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
    /**
     * Writing into a sink under a node role, which may only append to the history tables and
     * holds no DELETE anywhere (so that it can lock no table every node writes): its own
     * backends' rows are retracted from backend_stats only, through bpf_stats.node_delete, and
     * the history keeps their first increments.
     */
    private readonly asNode = false,
  ) {
    this.upsert = compiledAround((rows) =>
      db
        .insertInto('bpf_stats.backend_stats')
        .columns([
          'pid',
          'backend_start',
          'backend_type',
          'datid',
          'usesysid',
          'queryid',
          'cgroup',
          ...METRIC_COLUMN_NAMES,
          'last_seen',
          'exited_at',
        ])
        .expression(
          sql`SELECT u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid, u.cgroup,
                     ${metricColumnList('u')}, now(), ${usToTimestamp(sql`u.exited_us`)}
                FROM ${rows} AS u(pid, start_us, backend_type, datid, usesysid, queryid, cgroup, ${metricColumnList()}, exited_us)`,
        )
        .onConflict((oc) =>
          oc.columns(['node', 'pid', 'backend_start']).doUpdateSet({
            ...accumulate('bpf_stats.backend_stats'),
            backend_type: sql`excluded.backend_type`,
            datid: sql`coalesce(excluded.datid, bpf_stats.backend_stats.datid)`,
            usesysid: sql`coalesce(excluded.usesysid, bpf_stats.backend_stats.usesysid)`,
            queryid: sql`coalesce(excluded.queryid, bpf_stats.backend_stats.queryid)`,
            cgroup: sql`coalesce(excluded.cgroup, bpf_stats.backend_stats.cgroup)`,
            last_seen: sql`excluded.last_seen`,
            exited_at: sql`coalesce(excluded.exited_at, bpf_stats.backend_stats.exited_at)`,
          }),
        ),
    );
  }

  prepare({ maps, measured, lazy }: FlushInput): PreparedPart {
    const prepared = this.rows.prepare(maps, measured);
    const rows = prepared.backends;
    // The collector's own backends, written before their pid arrived with the connection: those
    // processes' rows (by pid and start), open or exited, cumulative and history alike; a pid
    // reused later is another row.
    const retracted = prepared.retracted;
    const ranges = sql`unnest(${retracted.map((r) => r.pid)}::int4[], ${retracted.map((r) => r.fromUs.toString())}::int8[],
                              ${retracted.map((r) => r.toUs.toString())}::int8[]) AS r(pid, from_us, to_us)`;
    const within = sql`b.pid = r.pid AND b.backend_start BETWEEN ${usToTimestamp(sql`r.from_us`)} AND ${usToTimestamp(sql`r.to_us`)}`;
    const retract = !retracted.length
      ? []
      : this.asNode
        ? // A data-modifying CTE runs whether or not the flush reads it, a SELECT would not: the
          // node's delete is an INSERT of the nothing node_delete's count yields (never below 0).
          [
            sql`INSERT INTO bpf_stats.backend_stats (pid, backend_start, backend_type)
                SELECT NULL, NULL, NULL
                  FROM bpf_stats.node_delete('bpf_stats.backend_stats',
                         ARRAY(SELECT b.ctid FROM bpf_stats.backend_stats b, ${ranges} WHERE ${within})) AS d(n)
                 WHERE d.n < 0`,
          ]
        : (['backend_stats', 'backend_stats_history'] as const).map(
            (table) => sql`DELETE FROM ${sql.table(`bpf_stats.${table}`)} b USING ${ranges} WHERE ${within}`,
          );
    if (!rows.length) return { statements: retract, commit: prepared.commitBackends };
    const build = () => [
      this.upsert(
        sql`unnest(${backendIdentityArrays(rows)}, ${rows.map((r) => r.cgroup)}::text[],
                   ${metricArrays(rows.map((r) => r.values))}, ${binaryArray(
                     'int8',
                     rows.map((r) => r.exitedAtUs),
                   )}::int8[])`,
      ),
    ];
    // Quiet background processes wait (in BPF, cumulative) for a flush that writes something else.
    if (lazy && !prepared.backendsUrgent && !retract.length) {
      return { statements: [], build, companion: true, commit: prepared.commitBackends, skipped: () => undefined };
    }
    return { statements: [...retract, ...build()], commit: prepared.commitBackends };
  }
}
