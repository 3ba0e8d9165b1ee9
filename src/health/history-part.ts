import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../flush/flush-part.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { binaryArray } from '../storage/binary-array.js';
import { METRIC_COLUMN_NAMES, metricArrays, metricColumnList, usToTimestamp } from '../storage/metric-arrays.js';
import type { QueryIncrements } from '../storage/query-increments.js';
import type { BackendRow, MetricRowSet, QueryRow } from '../storage/metric-row.js';
import type { MetricValue } from '../families/metric-values.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { addExact } from '../exact-int.js';
import { MAX_ROWS_PER_TABLE, retractedRowTest, type MetricRows } from '../storage/metric-rows.js';
import { queryIdentityKey } from '../collector/map-samples.js';

/** How often periodic flushes write history rows by default: each row is a key's increments over this long. */
export const DEFAULT_HISTORY_INTERVAL_MS = 300_000;
/**
 * Keys per table whose sums wait in memory at most: beyond, history is written early. As many
 * as one flush writes cumulative rows per table at most (its row budget), so a flush carrying
 * history is at most twice one without, and still commits within the time its connection
 * lives (under churn, or when something terminates it). Below it, a server with thousands of
 * statements active in every flush keeps one history row per key per interval (goal 6).
 */
const MAX_PENDING_ROWS = MAX_ROWS_PER_TABLE;

/**
 * The history tables' part of a flush, at its own granularity: the increments of the flushes
 * written since the last history row are summed per key in memory, and written as one row per
 * key every `intervalMs`, stamped with that flush's now() (so a row holds the key's increments
 * since its previous row). The pending sums only grow by what a written flush committed to the
 * cumulative tables, and only go once a flush carrying them succeeded, so history always sums to
 * query_stats / backend_stats once written. Explicit flushes (stop, pause, a caller's flush())
 * write what is pending at once; so does every flush when intervalMs is 0. History rows only go
 * along with a flush that writes cumulative rows (or the health heartbeat).
 *
 * Memory: one pending row per key that changed in the interval, at most MAX_PENDING_ROWS per
 * table: past that (connection churn makes a key per connection), the sums are written early.
 *
 * @example
 * new FlushWriter(db, [queryStats, backendStats, new HistoryPart(db, rows, increments, 300_000), health]);
 */
export class HistoryPart implements FlushPart {
  readonly name = 'history';
  private pending: PendingHistory = { queries: new Map(), backends: new Map() };
  private writtenAt = performance.now();

  constructor(
    private readonly db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
    private readonly increments: QueryIncrements,
    private readonly intervalMs = 0,
  ) {}

  prepare({ maps, measured, lazy, startedMs }: FlushInput): PreparedPart {
    const batch = this.rows.prepare(maps, measured);
    // The collector's own backends leave history too (BackendStatsPart deletes their written rows).
    const own = retractedRowTest(batch.retracted);
    const forgetOwn = () => {
      if (!own) return;
      for (const [key, row] of this.pending.backends) if (own(row)) this.pending.backends.delete(key);
    };
    const queryKeys = batch.queries.map(queryIdentityKey);
    // From flush start to flush start, with 5% slack for timer jitter: with an interval equal to
    // the flush period, every flush writes history. Connection churn makes a new backend key per
    // connection: the sums also go out before they outgrow MAX_PENDING_ROWS.
    const due =
      !lazy ||
      startedMs - this.writtenAt >= this.intervalMs * 0.95 ||
      keysAfter(this.pending.queries, queryKeys) > MAX_PENDING_ROWS ||
      keysAfter(this.pending.backends, batch.backends.map(backendRowKey)) > MAX_PENDING_ROWS;
    // Not sent (only companions had something): what the flush prepared stays in the maps, not added here.
    if (!due) {
      const commit = () => {
        this.addToPending(batch, queryKeys);
        forgetOwn();
      };
      return { statements: [], commit, skipped: () => undefined };
    }
    // Built only if the flush is sent (history goes only with other rows).
    const build = () => {
      const queries = new Map<string, QueryRow>();
      for (const [key, sum] of this.pending.queries) queries.set(key, { ...sum.row, values: [...sum.values] });
      // A key with nothing pending goes as the very row query_stats sends (encoded once).
      batch.queries.forEach((row, i) => {
        const key = queryKeys[i]!;
        const before = queries.get(key);
        queries.set(key, before ? { ...row, values: sumValues(before.values, row.values) } : row);
      });
      const backends = new Map(own ? [...this.pending.backends].filter(([, row]) => !own(row)) : this.pending.backends);
      addBackends(backends, batch.backends);
      return historyInserts(this.db, this.increments, { queries: [...queries.values()], backends: [...backends.values()] });
    };
    return {
      statements: [],
      build,
      companion: true,
      commit: () => {
        this.pending = { queries: new Map(), backends: new Map() };
        this.writtenAt = startedMs;
      },
      skipped: () => undefined,
    };
  }

  /**
   * Adds a written flush's increments to what waits (the companion statements were not sent).
   * A query key's sums are its own array, added to in place: with thousands of keys changing in
   * every flush, a new array per key per flush was most of the work.
   */
  private addToPending(batch: MetricRowSet, queryKeys: readonly string[]): void {
    batch.queries.forEach((row, i) => {
      const key = queryKeys[i]!;
      const sum = this.pending.queries.get(key);
      if (!sum) this.pending.queries.set(key, { row, values: [...row.values] });
      else addValuesInto(sum.values, row.values);
    });
    addBackends(this.pending.backends, batch.backends);
  }
}

/** Adds backend rows to `into`, one per process: its sums, and the identity it has by now. */
function addBackends(into: Map<string, BackendRow>, rows: readonly BackendRow[]): void {
  for (const row of rows) {
    const key = backendRowKey(row);
    const before = into.get(key);
    into.set(
      key,
      before
        ? {
            ...row,
            datid: row.datid ?? before.datid,
            usesysid: row.usesysid ?? before.usesysid,
            queryid: row.queryid ?? before.queryid,
            exitedAtUs: row.exitedAtUs ?? before.exitedAtUs,
            values: sumValues(before.values, row.values),
          }
        : row,
    );
  }
}

/** Keys `pending` would hold with `keys` added. */
function keysAfter(pending: ReadonlyMap<string, unknown>, keys: readonly string[]): number {
  let count = pending.size;
  for (const key of keys) if (!pending.has(key)) count++;
  return count;
}

function backendRowKey(row: BackendRow): string {
  return `${row.pid}/${row.backendStartUs}`;
}

interface PendingHistory {
  /** Per query key: its latest row (the key), and its sums since history was last written, never shared. */
  queries: Map<string, { row: QueryRow; values: MetricValue[] }>;
  backends: Map<string, BackendRow>;
}

const COUNT_COLUMNS = METRIC_COLUMNS.map((c) => c.unit === 'count');

/** Column-wise sums; NULL (not measured in either) stays NULL. Counts stay exact (ExactInt), milliseconds are summed as numbers. */
export function sumValues(a: readonly MetricValue[], b: readonly MetricValue[]): MetricValue[] {
  return a.map((x, i) => {
    const y = b[i] ?? null;
    if (x === null) return y;
    if (y === null) return x;
    return COUNT_COLUMNS[i] ? addExact(x, y) : Number(x) + Number(y);
  });
}

/** sumValues(into, add), written into `into`. */
function addValuesInto(into: MetricValue[], add: readonly MetricValue[]): void {
  for (let i = 0; i < into.length; i++) {
    const x = into[i] ?? null;
    const y = add[i] ?? null;
    if (y === null) continue;
    into[i] = x === null ? y : COUNT_COLUMNS[i] ? addExact(x, y) : Number(x) + Number(y);
  }
}

/** One INSERT ... SELECT FROM unnest(...) per history table that has rows. */
function historyInserts(db: Kysely<BpfStatsDatabase>, increments: QueryIncrements, batch: MetricRowSet): RawBuilder<unknown>[] {
  const metrics = metricColumnList();
  const statements: RawBuilder<unknown>[] = [];
  if (batch.queries.length) {
    const rows = batch.queries;
    const insert = db
      .insertInto('bpf_stats.query_stats_history')
      .columns(['ts', 'userid', 'dbid', 'toplevel', 'queryid', ...METRIC_COLUMN_NAMES])
      .expression(
        sql`SELECT now(), u.* FROM ${increments.unnest(rows)} AS u`,
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
          ${binaryArray('int4', rows.map((r) => r.pid))}::int4[], ${binaryArray('int8', rows.map((r) => r.backendStartUs))}::int8[],
          ${rows.map((r) => r.backendType)}::text[], ${binaryArray('oid', rows.map((r) => r.datid))}::oid[],
          ${binaryArray('oid', rows.map((r) => r.usesysid))}::oid[], ${binaryArray('int8', rows.map((r) => r.queryid))}::int8[],
          ${metricArrays(rows.map((r) => r.values))})
          AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${metrics})`,
      );
    statements.push(sql`${insert}`);
  }
  return statements;
}
