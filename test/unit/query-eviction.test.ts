import { describe, expect, it } from 'vitest';
import type { BackendSample, QuerySample } from '../../src/collector/map-samples.js';
import type { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { backendSample, metrics as figures, querySample as sample, snapshotOf } from '../support/map-samples.js';

/*
 * Eviction of quiet query keys (MetricRows): what the map held when a key was deleted is
 * written, including an increment that landed after the flush's read; a key that comes back
 * adds to its row from zero.
 */
const CALLS = METRIC_COLUMNS.findIndex((c) => c.column === 'calls');
const MEASURED = new Set(['query', 'cpu']);
const metrics = (calls: number) => figures({ calls });

/** A live client backend of user 10 in database 5, on statement `queryid` (0: none). */
function backend(pid: number, queryid: number, exitedNs = 0n): BackendSample {
  return backendSample({ pid, queryid: BigInt(queryid), exitedNs, retired: exitedNs !== 0n });
}

function snapshot(
  queries: QuerySample[],
  { entries = queries.length, maxEntries = 100, queriesFull = 0, backends = [] as BackendSample[], complete = true } = {},
): MapSnapshot {
  return snapshotOf({
    backends,
    queries,
    queriesComplete: complete,
    counters: { queries_full: BigInt(queriesFull) },
    fill: [{ map: 'queries', entries, maxEntries }],
  });
}

/** One flush: the query rows' calls, then the commit a written flush makes. */
function flush(rows: MetricRows, snap: MapSnapshot): Array<[string, unknown]> {
  const prepared = rows.prepare(snap, MEASURED);
  prepared.commitQueries();
  prepared.commitBackends();
  return prepared.queries.map((q) => [q.queryid, q.values[CALLS]]);
}

describe('query eviction', () => {
  it('evicts a key after three quiet flushes and writes what it gained between the read and the delete', () => {
    const evicted: number[] = [];
    const rows = new MetricRows(1, () => undefined, {
      // The key gained 2 calls after the last read: the delete returns 7, not 5.
      evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(7))),
    });
    expect(flush(rows, snapshot([sample(42, 5)]))).toEqual([['42', 5]]);
    expect(flush(rows, snapshot([sample(42, 5)]))).toEqual([]);
    expect(flush(rows, snapshot([sample(42, 5)]))).toEqual([]);
    expect(evicted).toEqual([]);
    expect(flush(rows, snapshot([sample(42, 5)]))).toEqual([]);
    expect(evicted).toEqual([42]);
    expect(rows.evictedQueries).toBe(1);
    // Gone from the map: the two calls are written, once.
    expect(flush(rows, snapshot([]))).toEqual([['42', 2]]);
    expect(flush(rows, snapshot([]))).toEqual([]);
    // Back in the map, counting from zero.
    expect(flush(rows, snapshot([sample(42, 1)]))).toEqual([['42', 1]]);
  });

  it('keeps a remainder when the flush that should write it fails, and adds it to a key already back', () => {
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map(() => metrics(9)) });
    flush(rows, snapshot([sample(7, 4)]));
    for (let i = 0; i < 3; i++) flush(rows, snapshot([sample(7, 4)]));
    // This flush fails: prepared, never committed.
    const failed = rows.prepare(snapshot([sample(7, 3)]), MEASURED);
    expect(failed.queries.map((q) => q.values[CALLS])).toEqual([8]); // 5 left over + 3 new
    expect(flush(rows, snapshot([sample(7, 3)]))).toEqual([['7', 8]]);
    expect(flush(rows, snapshot([sample(7, 3)]))).toEqual([]);
  });

  it('evicts after one quiet flush when the map is nearly full or a key could not be added', () => {
    const evicted: number[] = [];
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(1))) });
    flush(rows, snapshot([sample(1, 1), sample(2, 1)], { entries: 95 }));
    flush(rows, snapshot([sample(1, 1), sample(2, 2)], { entries: 95 }));
    expect(evicted).toEqual([1]);
    const other = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(1))) });
    flush(other, snapshot([sample(3, 1)], { queriesFull: 0 }));
    flush(other, snapshot([sample(3, 1)], { queriesFull: 4 }));
    expect(evicted).toEqual([1, 3]);
  });

  it('evicts keys a flush did not read (they did not change) as it evicts those it read unchanged', () => {
    const evicted: number[] = [];
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(1))) });
    expect(flush(rows, snapshot([sample(1, 1), sample(2, 1), sample(3, 1)]))).toHaveLength(3);
    // Reads of only what changed: 2 keeps changing, 1 and 3 are not read at all.
    flush(rows, snapshot([sample(2, 2)], { complete: false }));
    flush(rows, snapshot([sample(2, 3)], { complete: false }));
    expect(evicted).toEqual([]);
    expect(flush(rows, snapshot([sample(2, 4)], { complete: false }))).toEqual([['2', 1]]);
    expect(evicted.sort()).toEqual([1, 3]);
    // Key 2 stays while it changes: held, so an idle tick still has a key to watch.
    expect(rows.wouldWriteNothing(0n)).toBe(false);
  });

  it('forgets keys a whole read no longer has, and keeps those a partial read leaves out', () => {
    const evicted: number[] = [];
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(1))) });
    flush(rows, snapshot([sample(1, 1), sample(2, 1)]));
    // Key 1 left the map by other means; a whole read says so, and it is never evicted.
    flush(rows, snapshot([sample(2, 1)]));
    flush(rows, snapshot([], { complete: false }));
    flush(rows, snapshot([], { complete: false }));
    expect(evicted).toEqual([2]);
  });

  it('never evicts a key that keeps changing', () => {
    let calls = 0;
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map(() => (calls++, null)) });
    for (let i = 1; i <= 10; i++) flush(rows, snapshot([sample(5, i)], { entries: 100 }));
    expect(calls).toBe(0);
  });

  it('keeps a quiet key while a live backend is still on that statement, and evicts it once none is', () => {
    const evicted: number[] = [];
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map((k) => (evicted.push(k[0]!), metrics(0))) });
    // Under pressure: a key quiet for one flush goes, unless backend 300 is still running it (a
    // long sleep in the middle of the statement); its call is still to come.
    const full = { entries: 95 };
    flush(rows, snapshot([sample(8, 1), sample(9, 1)], { ...full, backends: [backend(300, 8), backend(301, 0)] }));
    flush(rows, snapshot([sample(8, 1), sample(9, 1)], { ...full, backends: [backend(300, 8), backend(301, 0)] }));
    expect(evicted).toEqual([9]);
    flush(rows, snapshot([sample(8, 1)], { ...full, backends: [backend(300, 8), backend(301, 0)] }));
    expect(evicted).toEqual([9]);
    // An exited backend's last statement is over.
    flush(rows, snapshot([sample(8, 1)], { ...full, backends: [backend(300, 8, 5n)] }));
    expect(evicted).toEqual([9, 8]);
  });
});
