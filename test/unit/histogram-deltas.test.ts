import { describe, expect, it } from 'vitest';
import { decodeHistograms } from '../../src/collector/decode-histograms.js';
import { HistogramDeltas } from '../../src/flush/histogram-deltas.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { toColumnValues } from '../../src/families/metric-values.js';
import type { MapBatch, MapLayout } from '../../src/native/bpf-native.js';

const SLOTS = 4;
/** struct hist_key { struct query_key q; __u32 kind; __u32 pad; } and struct hist { slots[4]; max_ns; } as BTF flattens them. */
const LAYOUT: MapLayout = {
  key: [
    { name: 'q.queryid', offset: 0, size: 8, kind: 'int', signed: false },
    { name: 'q.userid', offset: 8, size: 4, kind: 'int', signed: false },
    { name: 'q.dbid', offset: 12, size: 4, kind: 'int', signed: false },
    { name: 'q.toplevel', offset: 16, size: 4, kind: 'int', signed: false },
    { name: 'q.pad', offset: 20, size: 4, kind: 'int', signed: false },
    { name: 'kind', offset: 24, size: 4, kind: 'int', signed: false },
    { name: 'pad', offset: 28, size: 4, kind: 'int', signed: false },
  ],
  value: [
    { name: 'slots', offset: 0, size: 8 * SLOTS, kind: 'array', signed: false, count: SLOTS, elemSize: 8 },
    { name: 'max_ns', offset: 8 * SLOTS, size: 8, kind: 'int', signed: false },
  ],
};

/** One entry, two CPUs. */
function batch(kind: number, cpu0: number[], cpu1: number[], max: [number, number]): MapBatch {
  const keys = Buffer.alloc(32);
  keys.writeBigUInt64LE(0xfedcba9876543210n, 0);
  keys.writeUInt32LE(10, 8);
  keys.writeUInt32LE(5, 12);
  keys.writeUInt32LE(1, 16);
  keys.writeUInt32LE(kind, 24);
  const stride = 8 * SLOTS + 8;
  const values = Buffer.alloc(2 * stride);
  [cpu0, cpu1].forEach((slots, cpu) => {
    slots.forEach((c, i) => values.writeBigUInt64LE(BigInt(c), cpu * stride + i * 8));
    values.writeBigUInt64LE(BigInt(max[cpu]!), cpu * stride + 8 * SLOTS);
  });
  return { keys, values, count: 1, keySize: 32, valueSize: 2 * stride };
}

describe('decodeHistograms', () => {
  it('sums slots over CPUs, takes the max over CPUs, and names the kind', () => {
    const [sample] = decodeHistograms(batch(1, [1, 2, 0, 0], [0, 3, 4, 0], [7_000, 9_000]), LAYOUT, 2);
    expect(sample).toMatchObject({ userid: 10, dbid: 5, toplevel: true, kind: 'runq', queryid: 0xfedcba9876543210n });
    expect(sample!.slots).toEqual([1n, 5n, 4n, 0n]);
    expect(sample!.maxNs).toBe(9_000n);
  });

  it('skips kinds it has no name for', () => {
    expect(decodeHistograms(batch(9, [1, 0, 0, 0], [0, 0, 0, 0], [1, 1]), LAYOUT, 2)).toEqual([]);
  });
});

describe('HistogramDeltas', () => {
  it('writes per-flush increments, and the same ones again when a flush was not committed', () => {
    const deltas = new HistogramDeltas();
    const first = decodeHistograms(batch(0, [1, 2, 0, 0], [0, 0, 0, 0], [3_000_000, 0]), LAYOUT, 2);
    const a = deltas.prepare(first);
    expect(a.rows).toHaveLength(1);
    expect(a.rows[0]).toMatchObject({ kind: 'query_latency', counts: [1n, 2n, 0n, 0n], maxMs: 3, queryid: BigInt.asIntN(64, 0xfedcba9876543210n).toString() });
    a.commit();
    const second = decodeHistograms(batch(0, [1, 2, 0, 1], [0, 1, 0, 0], [3_000_000, 0]), LAYOUT, 2);
    const failed = deltas.prepare(second); // not committed: the write failed
    expect(failed.rows[0]!.counts).toEqual([0n, 1n, 0n, 1n]);
    const retried = deltas.prepare(second);
    expect(retried.rows[0]!.counts).toEqual([0n, 1n, 0n, 1n]);
    retried.commit();
    expect(deltas.prepare(second).rows).toEqual([]); // nothing new: no row
  });
});

describe('llc columns', () => {
  it('are NULL unless the llc set ran, never a fake zero', () => {
    const deltas = METRIC_COLUMNS.map(() => 0n);
    const at = METRIC_COLUMNS.findIndex((c) => c.column === 'llc_misses');
    expect(toColumnValues(deltas, new Set(['cpu', 'latency']))[at]).toBeNull();
    expect(toColumnValues(deltas, new Set(['cpu', 'llc']))[at]).toBe(0n);
  });
});
