import { describe, expect, it } from 'vitest';
import type { BackendSample } from '../../src/collector/map-samples.js';
import type { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { backendSample, metrics, snapshotOf } from '../support/map-samples.js';

/*
 * The collector's own backends (MetricRows.excluded): a connection's backend is counted from
 * fork until its pid arrives with the connection, and a flush reads the maps, prepares, and
 * writes with awaits in between. Whatever the order of the read, the prepare, the exclusion
 * and the commit, no figure of that process stays written, and another process with the same
 * pid is not touched.
 */
const MEASURED = new Set(['cpu']);
const ON_CPU = METRIC_COLUMNS.findIndex((c) => c.column === 'on_cpu_ms');
const OWN_PID = 4242;

function backend(pid: number, taskStartNs: bigint, onCpuNs: number, exitedNs = 0n): BackendSample {
  return backendSample({ pid, key: pid + 100_000, metrics: metrics({ on_cpu_ms: onCpuNs }), taskStartNs, exitedNs });
}

function snapshot(backends: BackendSample[]): MapSnapshot {
  return snapshotOf({ backends });
}

function setup() {
  const forgotten: number[][] = [];
  const rows = new MetricRows(1, (records) => forgotten.push(records.map((r) => r.key)));
  const start = process.hrtime.bigint() - 1_000_000n; // forked a millisecond ago
  return { rows, forgotten, start };
}

describe("the collector's own backends", () => {
  it('are not written when the exclusion arrives between the read and the prepare', () => {
    const { rows, start } = setup();
    const read = snapshot([backend(OWN_PID, start, 5), backend(77, start, 9)]);
    rows.excluded(OWN_PID, [start]);
    const prepared = rows.prepare(read, MEASURED);
    expect(prepared.backends.map((b) => b.pid)).toEqual([77]);
    expect(prepared.retracted.map((r) => r.pid)).toEqual([OWN_PID]);
  });

  it('are retracted by the next flush when the exclusion arrives after the prepare, and then forgotten', () => {
    const { rows, start } = setup();
    const first = rows.prepare(snapshot([backend(OWN_PID, start, 5)]), MEASURED);
    expect(first.backends.map((b) => b.pid)).toEqual([OWN_PID]); // written, before anyone knew
    rows.excluded(OWN_PID, [start]); // while the flush's statement runs
    first.commitBackends();
    // The next flush reads the map after the exclusion: the record went with it.
    const second = rows.prepare(snapshot([]), MEASURED);
    const [retraction] = second.retracted;
    expect(retraction?.pid).toBe(OWN_PID);
    // The rows it deletes are those of that process: started before the exclusion, not after it.
    const nowUs = BigInt(Date.now()) * 1000n;
    expect(retraction!.fromUs).toBeLessThan(nowUs - 1000n);
    expect(retraction!.toUs).toBeGreaterThan(nowUs);
    expect(retraction!.toUs - retraction!.fromUs).toBeLessThan(10_000_000n);
    second.commitBackends();
    expect(rows.prepare(snapshot([]), MEASURED).retracted).toEqual([]);
  });

  it('are never written from a record that raced the exclusion, which the map forgets', () => {
    const { rows, forgotten, start } = setup();
    rows.excluded(OWN_PID, [start]);
    // A switch that looked the exclusion up just before it was set made a record anyway.
    const raced = rows.prepare(snapshot([backend(OWN_PID, start, 5, process.hrtime.bigint())]), MEASURED);
    expect(raced.backends).toEqual([]);
    raced.commitBackends();
    expect(forgotten.flat()).toEqual([OWN_PID + 100_000]);
    // Still retracted: that flush found a record of it; the next one that finds none ends it.
    const next = rows.prepare(snapshot([]), MEASURED);
    expect(next.retracted.map((r) => r.pid)).toEqual([OWN_PID]);
    next.commitBackends();
    expect(rows.prepare(snapshot([]), MEASURED).retracted).toEqual([]);
  });

  it('leave another process that had the same pid alone', () => {
    const { rows, start } = setup();
    const earlier = start - 60_000_000_000n; // exited a minute ago, its last figures not written yet
    const later = process.hrtime.bigint() + 1_000_000n; // the pid reused after ours ended
    rows.excluded(OWN_PID, [start]);
    const prepared = rows.prepare(snapshot([backend(OWN_PID, earlier, 3, start - 1n), backend(OWN_PID, later, 4)]), MEASURED);
    expect(prepared.backends.map((b) => b.values[ON_CPU])).toHaveLength(2);
  });
});
