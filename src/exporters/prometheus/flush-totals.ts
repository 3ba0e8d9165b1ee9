import type { FlushReport } from '../../sidecar/sidecar.js';
import type { MetricValue } from '../../families/metric-values.js';
import { COLUMN_METRICS } from './metric-names.js';

const TOTAL_TIME = COLUMN_METRICS.findIndex((m) => m.column === 'total_time_ms');

/** One statement's totals since the collector started, in base units (null: never measured). */
export interface QueryTotals {
  userid: number;
  dbid: number;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
  /** In COLUMN_METRICS order. */
  values: Array<number | null>;
}

/** One database's time in one wait event since the collector started (query_wait_events summed over its statements). */
export interface WaitEventTotals {
  dbid: number;
  waitEventType: string;
  waitEvent: string;
  waits: number;
  seconds: number;
}

/** What the collector's own health metrics show, from the last flushes. */
export interface FlushHealth {
  /** When the last successful flush began. */
  lastSuccessAt: Date | null;
  /** How long the last flush took (successful or not), in seconds. */
  lastSeconds: number | null;
  lastError: string | null;
  succeeded: number;
  failed: number;
  counters: Readonly<Record<string, bigint>>;
  fill: FlushReport['fill'];
  attached: readonly string[];
}

/**
 * The exporter's memory: every flush's committed increments added up since the collector
 * started, so that a scrape reads memory only (no query) and a flush pays O(its rows). Bounded:
 * beyond `maxQueries` statements the ones with the least time are forgotten (counted in
 * `evictedQueries`; a forgotten statement that comes back starts again from 0, which Prometheus
 * reads as a counter reset). Statements are summed over toplevel, as postgres_exporter labels them.
 *
 * @example
 * const totals = new FlushTotals(1000);
 * sidecar.onFlush((report) => totals.observe(report));
 * totals.top(100); // the 100 statements with the most total time
 */
export class FlushTotals {
  readonly queries = new Map<string, QueryTotals>();
  readonly backendTypes = new Map<string, Array<number | null>>();
  /** Per (dbid, kind): cumulative slot counts of query_histograms' log-linear buckets (histogram-layout.ts). */
  readonly histograms = new Map<string, { dbid: number; kind: string; slots: number[] }>();
  evictedQueries = 0;
  /**
   * Per (dbid, wait event): the time statements slept in it. A version names a few hundred events,
   * so this holds at most that many per database; past maxQueries pairs the ones with the least
   * time are forgotten (counted in evictedWaitEvents), as statements are.
   */
  readonly waitEvents = new Map<string, WaitEventTotals>();
  evictedWaitEvents = 0;
  readonly health: FlushHealth = {
    lastSuccessAt: null,
    lastSeconds: null,
    lastError: null,
    succeeded: 0,
    failed: 0,
    counters: {},
    fill: [],
    attached: [],
  };

  constructor(readonly maxQueries: number) {}

  observe(report: FlushReport): void {
    const health = this.health;
    health.lastSeconds = report.ms / 1000;
    health.attached = report.attached;
    if (Object.keys(report.counters).length) health.counters = report.counters;
    if (report.fill.length) health.fill = report.fill;
    if (report.error !== null) {
      health.failed++;
      health.lastError = report.error;
      return;
    }
    health.succeeded++;
    health.lastError = null;
    health.lastSuccessAt = report.at;

    for (const row of report.queryRows) {
      const key = `${row.userid}/${row.dbid}/${row.queryid}`;
      let totals = this.queries.get(key);
      if (!totals)
        this.queries.set(
          key,
          (totals = { userid: row.userid, dbid: row.dbid, queryid: row.queryid, values: COLUMN_METRICS.map(() => null) }),
        );
      add(totals.values, row.values);
    }
    for (const row of report.backendRows) {
      let values = this.backendTypes.get(row.backendType);
      if (!values) this.backendTypes.set(row.backendType, (values = COLUMN_METRICS.map(() => null)));
      add(values, row.values);
    }
    for (const row of report.histogramRows) {
      const key = `${row.dbid}/${row.kind}`;
      let histogram = this.histograms.get(key);
      if (!histogram) this.histograms.set(key, (histogram = { dbid: row.dbid, kind: row.kind, slots: row.counts.map(() => 0) }));
      for (const [i, c] of row.counts.entries()) histogram.slots[i] = (histogram.slots[i] ?? 0) + Number(c);
    }
    for (const row of report.waitEventRows) {
      if (row.waitEventType === '') continue; // asleep without a wait event: not a wait event's series
      const key = `${row.dbid}/${row.waitEventType}/${row.waitEvent}`;
      let totals = this.waitEvents.get(key);
      if (!totals)
        this.waitEvents.set(
          key,
          (totals = { dbid: row.dbid, waitEventType: row.waitEventType, waitEvent: row.waitEvent, waits: 0, seconds: 0 }),
        );
      totals.waits += Number(row.waits);
      totals.seconds += row.waitMs / 1000;
    }
    if (this.waitEvents.size > this.maxQueries * 1.25) this.trimWaitEvents();
    // Trimmed in batches, so that the sort is paid once per maxQueries/4 new statements.
    if (this.queries.size > this.maxQueries * 1.25) this.trim();
  }

  /** The `n` statements with the most total time since the collector started. */
  top(n: number): QueryTotals[] {
    return [...this.queries.values()].sort((a, b) => time(b) - time(a)).slice(0, n);
  }

  private trimWaitEvents(): void {
    const kept = [...this.waitEvents.values()].sort((a, b) => b.seconds - a.seconds).slice(0, this.maxQueries);
    this.evictedWaitEvents += this.waitEvents.size - kept.length;
    this.waitEvents.clear();
    for (const w of kept) this.waitEvents.set(`${w.dbid}/${w.waitEventType}/${w.waitEvent}`, w);
  }

  private trim(): void {
    const kept = this.top(this.maxQueries);
    this.evictedQueries += this.queries.size - kept.length;
    this.queries.clear();
    for (const q of kept) this.queries.set(`${q.userid}/${q.dbid}/${q.queryid}`, q);
  }
}

function time(q: QueryTotals): number {
  return q.values[TOTAL_TIME] ?? 0;
}

/** Adds one flush's increments (milliseconds for times, bigints for counts) in base units. */
function add(totals: Array<number | null>, increments: readonly MetricValue[]): void {
  increments.forEach((v, i) => {
    if (v === null) return;
    totals[i] = (totals[i] ?? 0) + Number(v) * COLUMN_METRICS[i]!.scale;
  });
}
