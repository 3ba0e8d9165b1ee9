import { describe, expect, it } from 'vitest';
import type { BackendSample, QuerySample } from '../../src/collector/map-samples.js';
import type { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import { backendSample, metrics, querySample, snapshotOf } from '../support/map-samples.js';

/*
 * A flush that is not written (its connection terminated mid-statement, again and again, under
 * a connection storm) must not leave the next one bigger: each unwritten flush halves the rows
 * per table of the next, so one small enough to commit comes, frees the exited processes' map
 * entries first, and the budget grows back as flushes are written. Nothing is lost: rows left
 * out come with a later flush.
 */
const MEASURED = new Set(['cpu']);
const ON_CPU = METRIC_COLUMNS.findIndex((c) => c.column === 'on_cpu_ms');
const START = process.hrtime.bigint() - 60_000_000_000n;

function backend(pid: number, onCpuNs: number, exited: boolean): BackendSample {
  return backendSample({
    pid,
    metrics: metrics({ on_cpu_ms: onCpuNs }),
    backendStartUs: BigInt(pid) * 1000n,
    taskStartNs: START,
    exitedNs: exited ? START + 1n : 0n,
  });
}

const query = querySample;

function snapshot(backends: BackendSample[], queries: QuerySample[] = []): MapSnapshot {
  return snapshotOf({ backends, queries });
}

describe('rows per flush after failed flushes', () => {
  it('halves with each unwritten flush down to 128, writes exited processes first, and doubles back once written', () => {
    const forgotten: number[] = [];
    const rows = new MetricRows(1, (records) => forgotten.push(...records.map((r) => r.key)));
    const live = Array.from({ length: 300 }, (_, i) => backend(10_000 + i, 1000 + i, false));
    const exited = Array.from({ length: 20_000 }, (_, i) => backend(100_000 + i, 500, true));
    const sizes: number[] = [];
    for (let attempt = 0; attempt < 9; attempt++) {
      const prepared = rows.prepare(snapshot([...live, ...exited]), MEASURED);
      sizes.push(prepared.backends.length);
      expect(prepared.backends.length + prepared.deferred).toBe(20_300);
    }
    expect(sizes).toEqual([16_384, 8192, 4096, 2048, 1024, 512, 256, 128, 128]);

    // The flush that commits: only exited processes (they free map entries), all forgotten.
    const small = rows.prepare(snapshot([...live, ...exited]), MEASURED);
    expect(small.backends.every((b) => b.exitedAtUs !== null)).toBe(true);
    small.commitQueries();
    small.commitBackends();
    expect(forgotten).toHaveLength(128);

    // What is left of the exited ones and every live one come with the next flushes, growing back.
    const left = exited.slice(128);
    const next = rows.prepare(snapshot([...live, ...left]), MEASURED);
    expect(next.backends).toHaveLength(256);
    next.commitBackends();
    const after = rows.prepare(snapshot([...live, ...left.slice(256)]), MEASURED);
    expect(after.backends).toHaveLength(512);
    after.commitBackends();

    // A live process left out until now is written with its whole delta since the last written one.
    let remaining = left.slice(256 + 512);
    const seen = new Map<number, number>();
    for (let i = 0; i < 10 && (remaining.length || seen.size < live.length); i++) {
      const prepared = rows.prepare(snapshot([...live, ...remaining]), MEASURED);
      for (const b of prepared.backends) if (b.exitedAtUs === null) seen.set(b.pid, Number(b.values[ON_CPU]));
      remaining = remaining.slice(prepared.backends.filter((b) => b.exitedAtUs !== null).length);
      prepared.commitBackends();
    }
    expect(remaining).toHaveLength(0);
    expect(seen.size).toBe(live.length);
    for (const b of live) expect(seen.get(b.pid), `pid ${b.pid}`).toBeCloseTo((1000 + (b.pid - 10_000)) / 1e6, 9);
  });

  it('writes the rows left out longest first, so no row waits while others are written again and again', () => {
    const MEASURED = new Set(['cpu', 'query']);
    const rows = new MetricRows(1, () => undefined);
    // Failed flushes bring the budget down to 128.
    for (let i = 0; i < 8; i++) rows.prepare(snapshot([], [query(1, 1)]), MEASURED);
    // Then every other flush fails, so the budget stays between 128 and 256, while 1,000
    // statements each run once more between flushes: more than any flush may write.
    const CALLS = METRIC_COLUMNS.findIndex((c) => c.column === 'calls');
    const written = new Map<string, number>();
    let calls = 1;
    for (let round = 0; round < 12; round++) {
      calls++;
      const committed = rows.prepare(
        snapshot(
          [],
          Array.from({ length: 1000 }, (_, i) => query(1000 + i, calls)),
        ),
        MEASURED,
      );
      expect(committed.queries.length).toBe(128);
      committed.commitQueries();
      for (const q of committed.queries) written.set(q.queryid, (written.get(q.queryid) ?? 0) + Number(q.values[CALLS]));
      calls++;
      rows.prepare(
        snapshot(
          [],
          Array.from({ length: 1000 }, (_, i) => query(1000 + i, calls)),
        ),
        MEASURED,
      ); // not written
    }
    // Map order alone wrote the same first 128 statements 12 times and never the other 872.
    expect(written.size).toBe(1000);
    // Once flushes are written again, the rest comes, and each statement's rows add up to its calls.
    for (let flush = 0; flush < 6; flush++) {
      const prepared = rows.prepare(
        snapshot(
          [],
          Array.from({ length: 1000 }, (_, i) => query(1000 + i, calls)),
        ),
        MEASURED,
      );
      prepared.commitQueries();
      for (const q of prepared.queries) written.set(q.queryid, (written.get(q.queryid) ?? 0) + Number(q.values[CALLS]));
    }
    expect([...written.values()].filter((n) => n !== calls)).toEqual([]);
  });
});
