import { beforeAll, describe, expect, it } from 'vitest';
import type { FlushInput, PreparedPart } from '../../src/families/flush-part.js';
import type { HistogramRow } from '../../src/flush/histogram-deltas.js';
import { HistoryPart, histogramHistoryRows } from '../../src/flush/history-part.js';
import { MAX_ROWS_PER_TABLE } from '../../src/families/flush-part.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { QueryIncrements } from '../../src/storage/query-increments.js';
import { answeringDb, queryHistoryRows } from '../support/increments-db.js';
import { querySample, snapshotOf } from '../support/map-samples.js';

/*
 * History at its own granularity on a server with thousands of active statements: the same keys
 * changing in every flush wait in memory as one sum each until the interval is over; only more
 * distinct keys than a flush writes per table make history go early. A flush never carries more
 * history rows per table than its row budget, which halves after a flush that was not written.
 */
const MEASURED = new Set(['query']);
const db = answeringDb();
let increments: QueryIncrements;
beforeAll(async () => {
  increments = await QueryIncrements.resolve(db);
});

interface Flush {
  history: PreparedPart;
  /** As FlushWriter does once the statement succeeded. */
  written(): void;
}

/** One flush of `keys` statements (ids from `first`), each at `calls` so far; lazy unless said. */
function flush(rows: MetricRows, history: HistoryPart, first: number, keys: number, calls: number, lazy = true): Flush {
  const maps = snapshotOf({ queries: Array.from({ length: keys }, (_, i) => querySample(first + i, calls)) });
  const input: FlushInput = { maps, measured: MEASURED, lazy, startedMs: performance.now() };
  const prepared = history.prepare(input);
  const rowsOf = rows.prepare(maps, MEASURED);
  return {
    history: prepared,
    written: () => {
      rowsOf.commitQueries();
      rowsOf.commitBackends();
      prepared.commit();
    },
  };
}

describe('history between intervals', () => {
  it('keeps one sum per key however many flushes change it, and goes early past the row budget in distinct keys', () => {
    const rows = new MetricRows(1, () => undefined);
    const history = new HistoryPart(db, rows, increments, 300_000);
    const busy = 10_000;
    // The same 10,000 statements in three flushes: 10,000 sums wait, none written.
    for (const calls of [1, 2, 3]) {
      const f = flush(rows, history, 0, busy, calls);
      expect(f.history.build).toBeUndefined();
      f.written();
    }
    // Up to the budget in distinct keys still waits; one more goes out with this flush.
    const upTo = flush(rows, history, busy, MAX_ROWS_PER_TABLE - busy, 1);
    expect(upTo.history.build).toBeUndefined();
    upTo.written();
    // 16,385 keys for 16,384 rows: the new one and the 16,383 oldest; one waits for the next flush.
    const past = flush(rows, history, MAX_ROWS_PER_TABLE, 1, 1);
    expect(queryHistoryRows(past.history, db)).toBe(MAX_ROWS_PER_TABLE);
  });

  it('writes no more history per table than the row budget, and the rest with the next flushes', () => {
    const rows = new MetricRows(1, () => undefined);
    const history = new HistoryPart(db, rows, increments, 300_000);
    flush(rows, history, 0, 10_000, 1).written();
    // A flush that was not written (its connection terminated): the next has half the budget.
    flush(rows, history, 20_000, 100, 1, false);
    const halved = flush(rows, history, 20_000, 100, 1, false);
    expect(queryHistoryRows(halved.history, db)).toBe(MAX_ROWS_PER_TABLE / 2);
    halved.written();
    // The 10,100 keys go in two flushes: 8,192, then the 1,908 left with the next flush (lazy, but behind).
    const rest = flush(rows, history, 30_000, 0, 1);
    expect(queryHistoryRows(rest.history, db)).toBe(10_100 - MAX_ROWS_PER_TABLE / 2);
    rest.written();
    expect(flush(rows, history, 30_000, 0, 1).history.build).toBeUndefined();
  });
});

describe('histogram history', () => {
  const latency = (queryid: string, counts: Record<number, number>, maxMs: number): HistogramRow => ({
    userid: 10,
    dbid: 5,
    toplevel: true,
    queryid,
    kind: 'query_latency',
    counts: Array.from({ length: 256 }, (_, i) => counts[i] ?? 0),
    maxMs,
  });

  it('sums each histogram over the interval and writes only its non-zero buckets, with the largest max', () => {
    const rows = new MetricRows(1, () => undefined);
    let histograms: HistogramRow[] = [];
    const history = new HistoryPart(db, rows, increments, 300_000, () => histograms);
    // Two lazy flushes inside the interval: the increments wait, nothing is built.
    histograms = [latency('-7', { 40: 3, 41: 1 }, 2.5), latency('8', { 100: 1 }, 90)];
    let f = flush(rows, history, 0, 2, 1);
    expect(f.history.build).toBeUndefined();
    f.written();
    histograms = [latency('-7', { 41: 2, 60: 5 }, 3.5)];
    f = flush(rows, history, 0, 2, 2);
    expect(f.history.build).toBeUndefined();
    f.written();
    // An explicit flush writes what waits, with this flush's own increments.
    histograms = [latency('-7', { 40: 1 }, 3.5)];
    f = flush(rows, history, 0, 2, 3, false);
    const insert = f.history.build!()
      .map((s) => s.compile(db))
      .find((s) => s.sql.includes('query_histogram_history'));
    expect(insert).toBeDefined();
    const [, , , queryids, kinds, maxMs, observations, buckets, counts] = insert!.parameters as unknown[][];
    expect(queryids).toEqual(['-7', '8']);
    expect(kinds).toEqual(['query_latency', 'query_latency']);
    expect(buckets).toEqual(['{40,41,60}', '{100}']);
    expect(counts).toEqual(['{4,3,5}', '{1}']);
    expect(observations).toEqual(['12', '1']);
    expect(maxMs).toEqual([3.5, 90]);
    f.written();
    // Written: nothing waits any more.
    histograms = [];
    expect(flush(rows, history, 0, 2, 3).history.build).toBeUndefined();
  });

  it('leaves out a histogram that gained nothing', () => {
    const out = histogramHistoryRows(new Map(), [latency('1', {}, 0), latency('2', { 3: 1 }, 0.004)], ['a', 'b'], 10);
    expect(out.rows.map((r) => r.row.queryid)).toEqual(['2']);
    expect(out.keys).toEqual(['a', 'b']);
  });
});
