import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../families/flush-part.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { compiledAround } from './compiled-around.js';
import { backendIdentityArrays, METRIC_COLUMN_NAMES, metricArrays, metricColumnList, usToTimestamp } from '../storage/metric-arrays.js';
import type { QueryIncrements } from '../storage/query-increments.js';
import type { BackendRow, MetricRowSet, QueryRow } from '../storage/metric-row.js';
import type { MetricValue } from '../families/metric-values.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { addExact, sumExact, type ExactInt } from '../exact-int.js';
import { MAX_ROWS_PER_TABLE } from '../families/flush-part.js';
import { retractedRowTest, type MetricRows } from './metric-rows.js';
import { queryIdentityKey } from '../collector/map-samples.js';
import type { HistogramRow } from './histogram-deltas.js';

/** How often periodic flushes write history rows by default: each row is a key's increments over this long. */
export const DEFAULT_HISTORY_INTERVAL_MS = 300_000;
/**
 * Keys per table whose sums wait in memory at most: beyond, history is written early. Below it,
 * a server with thousands of statements active in every flush keeps one history row per key per
 * interval (goal 6).
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
 * A flush carries at most as many history rows per table as it may write cumulative rows (the
 * row budget, which halves after each flush that was not written): under hostile conditions (its
 * connection terminated every 2 s) a flush small enough to commit still comes. Keys left out wait,
 * oldest first, for the next flush that writes anything (history only goes along with rows).
 *
 * Memory: one pending row per key that changed in the interval, at most MAX_PENDING_ROWS per
 * table: past that (connection churn makes a key per connection), the sums are written early.
 * A pending histogram holds only the buckets that gained something: typically a few dozen of
 * 256, at worst 256 map entries for each of MAX_PENDING_ROWS (query, kind) keys.
 *
 * @example
 * new FlushWriter(db, [queryStats, backendStats, new HistoryPart(db, rows, increments, 300_000), health]);
 */
export class HistoryPart implements FlushPart {
  readonly name = 'history';
  private pending: PendingHistory = { queries: new Map(), backends: new Map(), histograms: new Map() };
  private writtenAt = performance.now();
  /** The last history written left keys waiting (the row budget): the next flush writes them. */
  private behind = false;

  private readonly inserts: (batch: MetricRowSet) => RawBuilder<unknown>[];

  constructor(
    db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
    increments: QueryIncrements,
    private readonly intervalMs = 0,
    /**
     * The histogram increments this flush writes (HistogramsPart.preparedRows, prepared before
     * this part): summed per (query, kind) like the metric rows, and written with them into
     * query_histogram_history. Absent: no histogram history.
     */
    private readonly histogramRows: () => readonly HistogramRow[] = () => [],
  ) {
    this.inserts = historyInserts(db, increments);
  }

  prepare({ maps, measured, lazy, startedMs }: FlushInput): PreparedPart {
    const batch = this.rows.prepare(maps, measured);
    // The collector's own backends leave history too (BackendStatsPart deletes their written rows).
    const own = retractedRowTest(batch.retracted);
    const forgetOwn = () => {
      if (!own) return;
      for (const [key, sum] of this.pending.backends) if (own(sum.row)) this.pending.backends.delete(key);
    };
    const queryKeys = batch.queries.map(queryIdentityKey);
    const backendKeys = batch.backends.map(backendRowKey);
    const histograms = this.histogramRows();
    const histogramKeys = histograms.map(histogramRowKey);
    // From flush start to flush start, with 5% slack for timer jitter: with an interval equal to
    // the flush period, every flush writes history. Connection churn makes a new backend key per
    // connection: the sums also go out before they outgrow MAX_PENDING_ROWS.
    const due =
      !lazy ||
      this.behind ||
      startedMs - this.writtenAt >= this.intervalMs * 0.95 ||
      keysAfter(this.pending.queries, queryKeys) > MAX_PENDING_ROWS ||
      keysAfter(this.pending.backends, backendKeys) > MAX_PENDING_ROWS ||
      keysAfter(this.pending.histograms, histogramKeys) > MAX_PENDING_ROWS;
    // Not sent (only companions had something): what the flush prepared stays in the maps, not added here.
    if (!due) {
      const commit = () => {
        addToPending(this.pending.queries, batch.queries, queryKeys, latestQuery);
        addToPending(this.pending.backends, batch.backends, backendKeys, latestBackend);
        addHistogramsToPending(this.pending.histograms, histograms, histogramKeys);
        forgetOwn();
      };
      return { statements: [], commit, skipped: () => undefined };
    }
    const limit = batch.rowsPerTable;
    let written: { queries: string[]; backends: string[]; histograms: string[] } | null = null;
    // Built only if the flush is sent (history goes only with other rows).
    const build = () => {
      const queries = historyRows(this.pending.queries, batch.queries, queryKeys, limit, latestQuery);
      const backends = historyRows(this.pending.backends, batch.backends, backendKeys, limit, latestBackend, own);
      const buckets = histogramHistoryRows(this.pending.histograms, histograms, histogramKeys, limit);
      written = { queries: queries.keys, backends: backends.keys, histograms: buckets.keys };
      const statements = this.inserts({ queries: queries.rows, backends: backends.rows });
      if (buckets.rows.length) statements.push(histogramHistoryInsert(buckets.rows));
      return statements;
    };
    return {
      statements: [],
      build,
      companion: true,
      commit: () => {
        if (!written) return;
        for (const key of written.queries) this.pending.queries.delete(key);
        for (const key of written.backends) this.pending.backends.delete(key);
        for (const key of written.histograms) this.pending.histograms.delete(key);
        // This flush's own rows all went (a flush writes no more rows than its budget): only older sums can be left.
        forgetOwn();
        this.behind = this.pending.queries.size + this.pending.backends.size + this.pending.histograms.size > 0;
        this.writtenAt = startedMs;
      },
      skipped: () => undefined,
    };
  }
}

/**
 * One key's waiting history: its identity (a row without its values: with thousands of keys
 * waiting, each key's last row kept whole held an array of boxed numbers per key), and its sums
 * since its last history row, never shared.
 */
interface Waiting<Row> {
  row: Row;
  values: MetricValue[];
}

/** The `values` of a waiting key's identity row: the sums are in Waiting.values. */
const NOT_KEPT: MetricValue[] = Object.freeze([]) as unknown as MetricValue[];

/** The rows a flush writes as history: every row of `rows` with what its key had waiting, then waiting keys, oldest first, up to `limit`. */
function historyRows<Row extends { values: MetricValue[] }>(
  pending: ReadonlyMap<string, Waiting<Row>>,
  rows: readonly Row[],
  keys: readonly string[],
  limit: number,
  latest: (row: Row, earlier: Row) => Row,
  skip?: ((row: Row) => boolean) | null,
): { rows: Row[]; keys: string[] } {
  const out = new Map<string, Row>();
  rows.forEach((row, i) => {
    const key = keys[i]!;
    const before = pending.get(key);
    // A key with nothing waiting goes as the very row the cumulative table gets (encoded once).
    out.set(key, before ? { ...latest(row, before.row), values: sumValues(before.values, row.values) } : row);
  });
  for (const [key, sum] of pending) {
    if (out.size >= limit) break;
    if (out.has(key) || skip?.(sum.row)) continue;
    out.set(key, { ...sum.row, values: [...sum.values] });
  }
  return { rows: [...out.values()], keys: [...out.keys()] };
}

/**
 * Adds a written flush's rows to what waits (the companion statements were not sent). A key's
 * sums are its own array, added to in place: with thousands of keys changing in every flush, a
 * new array per key per flush was most of the work.
 */
function addToPending<Row extends { values: MetricValue[] }>(
  pending: Map<string, Waiting<Row>>,
  rows: readonly Row[],
  keys: readonly string[],
  latest: (row: Row, earlier: Row) => Row,
): void {
  rows.forEach((row, i) => {
    const key = keys[i]!;
    const sum = pending.get(key);
    if (!sum) {
      pending.set(key, { row: { ...row, values: NOT_KEPT }, values: [...row.values] });
      return;
    }
    addValuesInto(sum.values, row.values);
    sum.row = latest(row, sum.row);
  });
}

/** A query key's identity never changes: the one it waits with stands. */
function latestQuery(_row: QueryRow, earlier: QueryRow): QueryRow {
  return earlier;
}

/** A process's latest identity (without the row's values), with what it had by now. */
function latestBackend(row: BackendRow, earlier: BackendRow): BackendRow {
  return {
    ...row,
    values: NOT_KEPT,
    datid: row.datid ?? earlier.datid,
    usesysid: row.usesysid ?? earlier.usesysid,
    queryid: row.queryid ?? earlier.queryid,
    exitedAtUs: row.exitedAtUs ?? earlier.exitedAtUs,
  };
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
  queries: Map<string, Waiting<QueryRow>>;
  backends: Map<string, Waiting<BackendRow>>;
  histograms: Map<string, WaitingHistogram>;
}

/**
 * One (query, kind) histogram's sums since its last history row: only the buckets that gained
 * something (a statement's latencies fill a few dozen of 256), and the largest observation so far.
 */
interface WaitingHistogram {
  row: HistogramRow;
  buckets: Map<number, ExactInt>;
  maxMs: number;
}

/** A histogram history row: the non-zero buckets, ascending, with their counts. */
export interface HistogramHistoryRow {
  row: HistogramRow;
  buckets: number[];
  counts: ExactInt[];
  maxMs: number;
}

function histogramRowKey(row: HistogramRow): string {
  return `${row.userid}/${row.dbid}/${row.toplevel}/${row.queryid}/${row.kind}`;
}

/** Adds a row's non-zero buckets into `into`. */
function addBuckets(into: Map<number, ExactInt>, counts: readonly ExactInt[]): void {
  counts.forEach((count, bucket) => {
    if (count === 0 || count === 0n) return;
    const sum = into.get(bucket);
    into.set(bucket, sum === undefined ? count : addExact(sum, count));
  });
}

/** Adds a written flush's histogram increments to what waits (history was not due). */
function addHistogramsToPending(pending: Map<string, WaitingHistogram>, rows: readonly HistogramRow[], keys: readonly string[]): void {
  rows.forEach((row, i) => {
    const key = keys[i]!;
    let sum = pending.get(key);
    if (!sum) {
      sum = { row: { ...row, counts: [] }, buckets: new Map(), maxMs: row.maxMs };
      pending.set(key, sum);
    }
    addBuckets(sum.buckets, row.counts);
    sum.maxMs = Math.max(sum.maxMs, row.maxMs);
  });
}

/**
 * The histogram history rows a flush writes: each of this flush's histograms with what its key
 * had waiting, then waiting keys, oldest first, up to `limit`. A histogram that gained nothing
 * (no bucket above 0) writes no row.
 */
export function histogramHistoryRows(
  pending: ReadonlyMap<string, WaitingHistogram>,
  rows: readonly HistogramRow[],
  keys: readonly string[],
  limit: number,
): { rows: HistogramHistoryRow[]; keys: string[] } {
  const out = new Map<string, WaitingHistogram>();
  rows.forEach((row, i) => {
    const key = keys[i]!;
    const before = pending.get(key);
    const buckets = new Map(before?.buckets ?? []);
    addBuckets(buckets, row.counts);
    out.set(key, { row, buckets, maxMs: Math.max(row.maxMs, before?.maxMs ?? 0) });
  });
  for (const [key, sum] of pending) {
    if (out.size >= limit) break;
    if (!out.has(key)) out.set(key, sum);
  }
  const written: HistogramHistoryRow[] = [];
  for (const { row, buckets, maxMs } of out.values()) {
    if (!buckets.size) continue;
    const ascending = [...buckets.keys()].sort((a, b) => a - b);
    written.push({ row, buckets: ascending, counts: ascending.map((b) => buckets.get(b)!), maxMs });
  }
  return { rows: written, keys: [...out.keys()] };
}

/** One INSERT of a flush's histogram history rows (each row's buckets and counts as one array literal). */
function histogramHistoryInsert(rows: readonly HistogramHistoryRow[]): RawBuilder<unknown> {
  return sql`
    INSERT INTO bpf_stats.query_histogram_history (ts, userid, dbid, toplevel, queryid, kind, buckets, counts, observations, max_so_far_ms)
    SELECT now(), u.userid, u.dbid, u.toplevel, u.queryid, u.kind, u.buckets::int2[], u.counts::int8[], u.observations, u.max_ms
      FROM unnest(${rows.map((r) => r.row.userid)}::oid[], ${rows.map((r) => r.row.dbid)}::oid[], ${rows.map((r) => r.row.toplevel)}::bool[],
                  ${rows.map((r) => r.row.queryid)}::int8[], ${rows.map((r) => r.row.kind)}::text[], ${rows.map((r) => r.maxMs)}::float8[],
                  ${rows.map((r) => sumExact(r.counts).toString())}::int8[], ${rows.map((r) => `{${r.buckets.join(',')}}`)}::text[],
                  ${rows.map((r) => `{${r.counts.join(',')}}`)}::text[])
           AS u(userid, dbid, toplevel, queryid, kind, max_ms, observations, buckets, counts)`;
}

const COUNT_COLUMNS = METRIC_COLUMNS.map((c) => c.unit === 'count');

/** Column-wise sums; NULL (not measured in either) stays NULL. Counts stay exact (ExactInt), milliseconds are summed as numbers. */
export function sumValues(a: readonly MetricValue[], b: readonly MetricValue[]): MetricValue[] {
  const sums = [...a];
  addValuesInto(sums, b);
  return sums;
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

/** One INSERT ... SELECT FROM unnest(...) per history table that has rows (texts compiled once). */
function historyInserts(db: Kysely<BpfStatsDatabase>, increments: QueryIncrements): (batch: MetricRowSet) => RawBuilder<unknown>[] {
  const insertQueries = compiledAround((rows) =>
    db
      .insertInto('bpf_stats.query_stats_history')
      .columns(['ts', 'userid', 'dbid', 'toplevel', 'queryid', ...METRIC_COLUMN_NAMES])
      .expression(sql`SELECT now(), u.* FROM ${rows} AS u`),
  );
  const insertBackends = compiledAround((rows) =>
    db
      .insertInto('bpf_stats.backend_stats_history')
      .columns(['ts', 'pid', 'backend_start', 'backend_type', 'datid', 'usesysid', 'queryid', ...METRIC_COLUMN_NAMES])
      .expression(
        sql`SELECT now(), u.pid, ${usToTimestamp(sql`u.start_us`)}, u.backend_type, u.datid, u.usesysid, u.queryid,
             ${metricColumnList('u')}
        FROM ${rows} AS u(pid, start_us, backend_type, datid, usesysid, queryid, ${metricColumnList()})`,
      ),
  );
  return (batch) => {
    const statements: RawBuilder<unknown>[] = [];
    if (batch.queries.length) statements.push(insertQueries(increments.unnest(batch.queries)));
    if (batch.backends.length) {
      const rows = batch.backends;
      statements.push(insertBackends(sql`unnest(${backendIdentityArrays(rows)}, ${metricArrays(rows.map((r) => r.values))})`));
    }
    return statements;
  };
}
