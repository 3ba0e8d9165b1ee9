import { describe, expect, it } from 'vitest';
import type { BackendSample } from '../../src/collector/map-samples.js';
import type { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { backendSample, metrics, snapshotOf } from '../support/map-samples.js';

/*
 * A backend row's key is (pid, backend_start). BPF reads backend_start from the process's own
 * PgBackendStatus, and only at its switch-outs: a process asleep since before the collector
 * attached has none yet. Its row then takes the backend_start pg_stat_activity shows for the
 * same process, so that it stays one row once BPF reads its own.
 */
const MEASURED = new Set(['cpu']);
/** CLOCK_MONOTONIC ns to wall-clock µs, as MetricRows fixes it (to within the test's run). */
const monotonicToUnixUs = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;

/** A process of postmaster 1 forked a minute ago; `statusStartUs`: what BPF read of its backend_start (0: nothing yet). */
function postmasterChild(pid: number, taskStartNs: bigint, statusStartUs = 0n, onCpuNs = 5_000_000): BackendSample {
  const known = statusStartUs !== 0n;
  return backendSample({
    pid,
    metrics: metrics({ on_cpu_ms: onCpuNs }),
    backendStartUs: statusStartUs,
    taskStartNs,
    userid: known ? 10 : 0,
    dbid: 0,
    backendType: known ? 6 : -1,
    identityKnown: known,
  });
}

function snapshot(backends: BackendSample[]): MapSnapshot {
  return snapshotOf({ backends });
}

const PG_EPOCH_UNIX_US = 946_684_800_000_000n;
const taskStartNs = process.hrtime.bigint() - 60_000_000_000n;
/** pg_stat_activity's backend_start of that process: 3 ms after its fork. */
const shownUs = taskStartNs / 1000n + monotonicToUnixUs + 3_000n;

describe('the backend_start of a row', () => {
  it('asks pg_stat_activity once for a process BPF has no identity of, and keys its row the same before and after BPF reads it', () => {
    const rows = new MetricRows(1, () => undefined);
    const asleep = snapshot([postmasterChild(300, taskStartNs)]);
    expect(rows.needsNames(asleep)).toBe(true);
    rows.observeStatActivity(asleep, [{ pid: 300, backendType: 'checkpointer', backendStartUs: shownUs }]);
    expect(rows.needsNames(snapshot([postmasterChild(300, taskStartNs)]))).toBe(false);
    const before = rows.prepare(asleep, MEASURED);
    before.commitBackends();
    expect(before.backends.map((b) => [b.backendType, b.backendStartUs])).toEqual([['checkpointer', shownUs]]);
    // Awake: BPF read the same start from its PgBackendStatus.
    const awake = rows.prepare(snapshot([postmasterChild(300, taskStartNs, shownUs - PG_EPOCH_UNIX_US, 9_000_000)]), MEASURED);
    expect(awake.backends.map((b) => b.backendStartUs)).toEqual([shownUs]);
  });

  it("does not take another process's backend_start under a pid given again, nor the postmaster's", () => {
    const rows = new MetricRows(1, () => undefined);
    const asleep = snapshot([postmasterChild(300, taskStartNs), postmasterChild(1, taskStartNs)]);
    rows.observeStatActivity(asleep, [{ pid: 300, backendType: 'walwriter', backendStartUs: shownUs + 30_000_000n }]);
    const prepared = rows.prepare(asleep, MEASURED);
    const starts = new Map(prepared.backends.map((b) => [b.pid, b.backendStartUs]));
    // The task's start (from the boot time: to the second, and as the clocks drifted), 30 s before the other process's.
    expect(Number(shownUs + 30_000_000n - starts.get(300)!)).toBeGreaterThan(20_000_000);
    expect(rows.needsNames(snapshot([postmasterChild(1, taskStartNs)]))).toBe(false);
  });
});
