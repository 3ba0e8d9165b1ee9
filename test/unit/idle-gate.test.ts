import { describe, expect, it } from 'vitest';
import type { Activity, QuerySample } from '../../src/collector/map-samples.js';
import { IdleGate } from '../../src/flush/idle-gate.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { querySample as sample, snapshotOf } from '../support/map-samples.js';

/*
 * The idle gate: a periodic flush ends before reading the maps only when nothing was noted since
 * the last full flush, and MetricRows says that flush left nothing for later.
 */
const MEASURED = new Set(['query', 'cpu']);

function flush(rows: MetricRows, queries: QuerySample[]): void {
  const prepared = rows.prepare(
    snapshotOf({ queries, counters: { queries_full: 0n }, fill: [{ map: 'queries', entries: queries.length, maxEntries: 100 }] }),
    MEASURED,
  );
  prepared.commitQueries();
  prepared.commitBackends();
}

describe('idle gate', () => {
  it('opens only after a full flush, and closes on any change or on enough busy time', () => {
    let activity: Activity = { changes: 5n, busyNs: 1000n };
    let settledFor: bigint | null = null;
    const gate = new IdleGate(
      () => activity,
      (busyNs) => {
        settledFor = busyNs;
        return busyNs < 10_000_000n;
      },
    );
    expect(gate.quiet()).toBe(false); // no full flush yet
    gate.flushed(gate.read());
    expect(gate.quiet()).toBe(true);
    activity = { changes: 5n, busyNs: 3000n };
    expect(gate.quiet()).toBe(true);
    expect(settledFor).toBe(2000n); // busy time since the mark, not since load
    activity = { changes: 5n, busyNs: 20_000_000n };
    expect(gate.quiet()).toBe(false);
    activity = { changes: 6n, busyNs: 1000n };
    expect(gate.quiet()).toBe(false);
    gate.flushed(gate.read());
    expect(gate.quiet()).toBe(true);
    gate.flushed(null); // a failed flush: the next tick is a full one
    expect(gate.quiet()).toBe(false);
    expect(gate.quietTicks).toBe(3);
  });

  it('is told to flush while written keys wait to be evicted as quiet, then not, until busy enough', () => {
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map(() => sample(42, 5).metrics) });
    flush(rows, [sample(42, 5)]);
    expect(rows.wouldWriteNothing(0n)).toBe(false);
    for (let i = 0; i < 3; i++) flush(rows, [sample(42, 5)]);
    // Evicted after three quiet flushes, owing nothing.
    expect(rows.evictedQueries).toBe(1);
    flush(rows, []);
    expect(rows.wouldWriteNothing(0n)).toBe(true);
    expect(rows.wouldWriteNothing(5_000_000n)).toBe(true); // under 10 ms: the backend rows wait
    expect(rows.wouldWriteNothing(2_000_000_000n)).toBe(false); // 2 s busy: they go out
  });

  it('is told to flush while a prepared flush was not written', () => {
    const rows = new MetricRows(1, () => undefined, { evictQueries: (keys) => keys.map(() => null) });
    rows.prepare(snapshotOf({ queries: [sample(1, 1)], counters: { queries_full: 0n } }), MEASURED);
    expect(rows.wouldWriteNothing(0n)).toBe(false);
  });
});
