import { sql, type Kysely, type RawBuilder, type Updateable } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../families/flush-part.js';
import type { MetricColumnName } from '../families/index.js';
import type { BpfStatsDatabase, MetricColumns } from '../storage/database.js';
import { compiledAround } from './compiled-around.js';
import { METRIC_COLUMN_NAMES } from '../storage/metric-arrays.js';
import type { QueryIncrements } from '../storage/query-increments.js';
import type { MetricRows } from './metric-rows.js';

/**
 * bpf_stats.query_stats' part of a flush: one INSERT ... SELECT FROM unnest(...) ON CONFLICT for
 * all rows, whatever their number, sent as one array of rows (QueryIncrements). Metric columns accumulate; a NULL increment (a probe set that
 * is off) leaves the stored value as it was.
 *
 * @example
 * new FlushWriter(db, [new QueryStatsPart(db, rows, await QueryIncrements.resolve(db)), ...]);
 */
export class QueryStatsPart implements FlushPart {
  readonly name = 'query_stats';

  private readonly upsert: (rows: RawBuilder<unknown>) => RawBuilder<unknown>;

  constructor(
    db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
    private readonly increments: QueryIncrements,
  ) {
    this.upsert = compiledAround((rows) =>
      db
        .insertInto('bpf_stats.query_stats')
        .columns(['userid', 'dbid', 'toplevel', 'queryid', ...METRIC_COLUMN_NAMES, 'last_seen'])
        .expression(sql`SELECT u.*, now() FROM ${rows} AS u`)
        .onConflict((oc) =>
          oc
            .columns(['node', 'userid', 'dbid', 'toplevel', 'queryid'])
            .doUpdateSet({ ...accumulate('bpf_stats.query_stats'), last_seen: sql`excluded.last_seen` }),
        ),
    );
  }

  prepare({ maps, measured }: FlushInput): PreparedPart {
    const prepared = this.rows.prepare(maps, measured);
    const rows = prepared.queries;
    // Committed even when nothing changed: quiet keys are counted and evicted at commit.
    if (!rows.length) return { statements: [], commit: prepared.commitQueries };
    return { statements: [this.upsert(this.increments.unnest(rows))], commit: prepared.commitQueries };
  }
}

/** SET col = stored + increment for every metric column; NULL increments keep the stored value. */
export function accumulate(table: string): { [C in MetricColumnName]: RawBuilder<Updateable<MetricColumns>[C]> } {
  const set = METRIC_COLUMN_NAMES.map((column) => {
    const stored = sql.ref(`${table}.${column}`);
    const increment = sql.ref(`excluded.${column}`);
    return [column, sql`CASE WHEN ${increment} IS NULL THEN ${stored} ELSE coalesce(${stored}, 0) + ${increment} END`];
  });
  // Each value is the column's own type: stored + increment.
  return Object.fromEntries(set) as { [C in MetricColumnName]: RawBuilder<Updateable<MetricColumns>[C]> };
}
