import { describe, expect, it } from 'vitest';
import { HistKind, Structs } from '../../src/bpf/contract.js';
import { decodeHistograms } from '../../src/collector/decode-histograms.js';
import { HistogramDeltas } from '../../src/flush/histogram-deltas.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { toColumnValues } from '../../src/families/metric-values.js';
import type { MapBatch, MapLayout } from '../../src/native/bpf-native.js';

/** struct hist_key and struct hist as the generated contract lays them out (the object's own BTF). */
const LAYOUT: MapLayout = { key: fieldsOf('hist_key'), value: fieldsOf('hist') };
const SLOTS = Structs.hist.fields.slots.count;
const KEY_SIZE = Structs.hist_key.size;
const STRIDE = Structs.hist.size;

function fieldsOf(struct: 'hist_key' | 'hist'): MapLayout['key'] {
  return Object.entries(Structs[struct].fields).map(([name, f]) =>
    'count' in f
      ? { name, offset: f.offset, size: f.size, kind: 'array' as const, signed: false, count: f.count, elemSize: f.elemSize }
      : { name, offset: f.offset, size: f.size, kind: 'int' as const, signed: f.signed },
  );
}

/** `first` followed by zeros up to the histogram's slot count. */
function padded(first: number[]): number[] {
  return [...first, ...new Array<number>(SLOTS - first.length).fill(0)];
}

/** One entry, two CPUs; `cpu0` and `cpu1` give the first slots, the rest are 0. */
function batch(kind: number, cpu0: number[], cpu1: number[], max: [number, number]): MapBatch {
  const key = Structs.hist_key.fields;
  const keys = Buffer.alloc(KEY_SIZE);
  keys.writeBigUInt64LE(0xfedcba9876543210n, key['q.queryid'].offset);
  keys.writeUInt32LE(10, key['q.userid'].offset);
  keys.writeUInt32LE(5, key['q.dbid'].offset);
  keys.writeUInt32LE(1, key['q.toplevel'].offset);
  keys.writeUInt32LE(kind, key.kind.offset);
  const values = Buffer.alloc(2 * STRIDE);
  [cpu0, cpu1].forEach((slots, cpu) => {
    for (const [i, c] of slots.entries()) values.writeBigUInt64LE(BigInt(c), cpu * STRIDE + Structs.hist.fields.slots.offset + i * 8);
    values.writeBigUInt64LE(BigInt(max[cpu]!), cpu * STRIDE + Structs.hist.fields.max_ns.offset);
  });
  return { keys, values, count: 1, keySize: KEY_SIZE, valueSize: 2 * STRIDE };
}

describe('decodeHistograms', () => {
  it('sums slots over CPUs, takes the max over CPUs, and names the kind', () => {
    const [sample] = decodeHistograms(batch(HistKind.HIST_RUNQ, [1, 2, 0, 0], [0, 3, 4, 0], [7_000, 9_000]), LAYOUT, 2);
    expect(sample).toMatchObject({ userid: 10, dbid: 5, toplevel: true, kind: 'runq', queryid: 0xfedcba9876543210n });
    expect(sample!.slots).toEqual(padded([1, 5, 4]));
    expect(sample!.maxNs).toBe(9_000n);
  });

  it('skips kinds it has no name for', () => {
    expect(decodeHistograms(batch(9, [1, 0, 0, 0], [0, 0, 0, 0], [1, 1]), LAYOUT, 2)).toEqual([]);
  });
});

describe('HistogramDeltas', () => {
  it('writes per-flush increments, and the same ones again when a flush was not committed', () => {
    const deltas = new HistogramDeltas();
    const first = decodeHistograms(batch(HistKind.HIST_QUERY_LATENCY, [1, 2, 0, 0], [0, 0, 0, 0], [3_000_000, 0]), LAYOUT, 2);
    const a = deltas.prepare(first);
    expect(a.rows).toHaveLength(1);
    expect(a.rows[0]).toMatchObject({
      kind: 'query_latency',
      counts: padded([1, 2, 0, 0]),
      maxMs: 3,
      queryid: BigInt.asIntN(64, 0xfedcba9876543210n).toString(),
    });
    a.commit();
    const second = decodeHistograms(batch(HistKind.HIST_QUERY_LATENCY, [1, 2, 0, 1], [0, 1, 0, 0], [3_000_000, 0]), LAYOUT, 2);
    const failed = deltas.prepare(second); // not committed: the write failed
    expect(failed.rows[0]!.counts).toEqual(padded([0, 1, 0, 1]));
    const retried = deltas.prepare(second);
    expect(retried.rows[0]!.counts).toEqual(padded([0, 1, 0, 1]));
    retried.commit();
    expect(deltas.prepare(second).rows).toEqual([]); // nothing new: no row
  });
});

describe('HistogramDeltas eviction', () => {
  const latency = (cpu0: number[]) => decodeHistograms(batch(HistKind.HIST_QUERY_LATENCY, cpu0, [0, 0, 0, 0], [2_000_000, 0]), LAYOUT, 2);
  /** One written flush of `samples` (the map as read), as HistogramsPart runs it. */
  const flush = (deltas: HistogramDeltas, samples: ReturnType<typeof latency>) => {
    const prepared = deltas.prepare(samples);
    prepared.commit();
    return prepared.rows;
  };

  it('deletes a histogram once written and quiet for 3 flushes, and writes what it gained after the read', () => {
    const deltas = new HistogramDeltas();
    const read = latency([4, 0, 0, 0]);
    const asked: Buffer[][] = [];
    // At its deletion the map held 2 more observations than the flushes read.
    const evict = (keys: Buffer[]) => (asked.push(keys), keys.map(() => latency([5, 1, 0, 0])[0]!));
    expect(flush(deltas, read)[0]!.counts).toEqual(padded([4]));
    deltas.evict(false, evict);
    flush(deltas, read);
    deltas.evict(false, evict);
    flush(deltas, read);
    deltas.evict(false, evict);
    expect(asked).toEqual([]);
    expect(deltas.settled(true)).toBe(false);
    flush(deltas, read);
    deltas.evict(false, evict);
    expect(asked).toHaveLength(1);
    expect(asked[0]![0]!.equals(read[0]!.rawKey)).toBe(true);
    expect(deltas.evicted).toBe(1);
    // The next flush reads an empty map and writes the remainder, once.
    expect(flush(deltas, [])).toEqual([expect.objectContaining({ kind: 'query_latency', counts: padded([1, 1]) })]);
    expect(flush(deltas, [])).toEqual([]);
    expect(deltas.settled(true)).toBe(true);
  });

  it('under pressure deletes after one quiet flush; a histogram that came back adds to its remainder', () => {
    const deltas = new HistogramDeltas();
    flush(deltas, latency([3, 0, 0, 0]));
    const evict = (keys: Buffer[]) => keys.map(() => latency([3, 0, 2, 0])[0]!);
    deltas.evict(true, evict);
    expect(deltas.evicted).toBe(0); // it changed in the last flush
    flush(deltas, latency([3, 0, 0, 0]));
    deltas.evict(true, evict);
    expect(deltas.evicted).toBe(1);
    // It came back with one observation: its row carries that and the remainder (2 in slot 2).
    expect(flush(deltas, latency([0, 1, 0, 0]))).toEqual([expect.objectContaining({ counts: padded([0, 1, 2]) })]);
  });

  it('keeps every histogram held when nothing could be deleted (eviction off on this kernel)', () => {
    const deltas = new HistogramDeltas();
    const read = latency([4, 0, 0, 0]);
    for (let i = 0; i < 5; i++) {
      flush(deltas, read);
      deltas.evict(true, () => null);
    }
    expect(deltas.evicted).toBe(0);
    expect(deltas.settled(true)).toBe(false); // still held, still quiet: evicted once deletion works
    expect(flush(deltas, read)).toEqual([]); // and nothing owed
  });

  it('keeps what changed, and a failed flush keeps the remainder owed', () => {
    const deltas = new HistogramDeltas();
    flush(deltas, latency([1, 0, 0, 0]));
    for (let i = 2; i <= 5; i++) {
      flush(deltas, latency([i, 0, 0, 0]));
      deltas.evict(false, () => {
        throw new Error('asked to evict a histogram that kept changing');
      });
    }
    const evict = (keys: Buffer[]) => keys.map(() => latency([6, 0, 0, 0])[0]!);
    for (let i = 0; i < 3; i++) {
      flush(deltas, latency([5, 0, 0, 0]));
      deltas.evict(false, evict);
    }
    expect(deltas.evicted).toBe(1);
    expect(deltas.prepare([]).rows).toEqual([expect.objectContaining({ counts: padded([1]) })]); // not committed
    expect(flush(deltas, [])).toEqual([expect.objectContaining({ counts: padded([1]) })]);
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
