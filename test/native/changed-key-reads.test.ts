import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CollectorBpfObject } from '../../src/bpf/collector-bpf-object.js';
import { Structs } from '../../src/bpf/contract.js';
import { collectorObjectPath } from '../../src/collector/collector-object.js';
import { ObjectGlobals } from '../../src/collector/object-globals.js';
import { ChangedKeyReads, HISTOGRAM_CHANGES, QUERY_CHANGES } from '../../src/collector/changed-key-reads.js';
import { loadNative } from '../../src/native/bpf-native.js';

/*
 * How a flush reads the queries map (ChangedKeyReads), on the real collector object's maps, with
 * no program attached: this test plays the programs' part, filling `queries` and noting keys in
 * `query_changes` as bpf/query-changes.bpf.h does.
 */
let object: CollectorBpfObject;
let globals: ObjectGlobals;
const cpus = loadNative().numPossibleCpus();

function key(queryid: number): Buffer {
  const k = Buffer.alloc(Structs.query_key.size);
  k.writeBigUInt64LE(BigInt(queryid), Structs.query_key.fields.queryid.offset);
  k.writeUInt32LE(10, Structs.query_key.fields.userid.offset);
  return k;
}

/** A query's figures on CPU 0, the other CPUs' zero. */
function add(queryid: number, calls: number): void {
  const stride = Math.ceil(Structs.query_value.size / 8) * 8;
  const value = Buffer.alloc(stride * cpus);
  value.writeBigUInt64LE(BigInt(calls), Structs.query_value.fields['m.calls'].offset);
  object.mapUpdate('queries', key(queryid), value);
}

function note(...queryids: number[]): void {
  for (const id of queryids) object.mapUpdate('query_changes', key(id), Buffer.from([1]));
}

function queryids(reads: ReturnType<ChangedKeyReads['read']>): number[] {
  const { batch } = reads;
  return Array.from({ length: batch.count }, (_, i) =>
    Number(batch.keys.readBigUInt64LE(i * batch.keySize + Structs.query_key.fields.queryid.offset)),
  ).sort((a, b) => a - b);
}

beforeAll(() => {
  object = new (loadNative().BpfObject)(collectorObjectPath()) as CollectorBpfObject;
  // Maps only: no program is loaded, so the verifier has nothing to do.
  for (const program of object.programs()) object.setAutoload(program.name as never, false);
  object.load();
  globals = new ObjectGlobals(object);
});

afterAll(() => object?.close());

describe('reading the queries map', () => {
  /** One flush: a read, and (unless it failed) its rows written. */
  // `held`: the keys the collector knows in the map (many, unless a test says otherwise).
  const flush = (reads: ChangedKeyReads, { overflows = 0n, written = true, all = true, held = 1000 } = {}) => {
    const read = reads.read(() => overflows, held);
    if (written) reads.written(all);
    return read;
  };

  it('reads the whole map first, then the keys noted since, and those taken the time before once more', () => {
    const reads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
    for (let id = 1; id <= 6; id++) add(id, id);
    note(1, 2, 3, 4, 5, 6);
    const first = flush(reads);
    expect(first.complete).toBe(true);
    expect(queryids(first)).toEqual([1, 2, 3, 4, 5, 6]);
    // Each read moves query_read on first, so that a key changed after it is noted again.
    expect(globals.readBss('query_read')).toBe(1n);

    note(2, 5);
    const second = flush(reads);
    expect(second.complete).toBe(false);
    expect(globals.readBss('query_read')).toBe(2n);
    // The six taken at the first read are read once more: an addition racing that read shows now.
    expect(queryids(second)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(second.taken).toBe(2);
    expect(object.mapLookupBatch('query_changes').count).toBe(0);

    note(4);
    expect(queryids(flush(reads))).toEqual([2, 4, 5]);
    expect(queryids(flush(reads))).toEqual([4]);
    expect(queryids(flush(reads))).toEqual([]);
  });

  it('reads again all that a read whose flush failed read, and the whole map after rows were left for later', () => {
    const reads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
    flush(reads);
    flush(reads);
    note(1);
    expect(queryids(flush(reads, { written: false }))).toEqual([1]);
    note(2);
    expect(queryids(flush(reads, { written: false }))).toEqual([1, 2]);
    note(3);
    // Written at last: 1, 2 and 3 are read, then only 3 once more (the race guard), then nothing.
    expect(queryids(flush(reads))).toEqual([1, 2, 3]);
    expect(queryids(flush(reads))).toEqual([3]);
    expect(queryids(flush(reads))).toEqual([]);
    note(4);
    expect(flush(reads, { all: false }).complete).toBe(false);
    expect(flush(reads).complete).toBe(true);
    expect(flush(reads).complete).toBe(false);
    // A whole read whose flush failed: the next is whole too.
    expect(flush(reads, { overflows: 1n, written: false }).complete).toBe(true);
    expect(flush(reads, { overflows: 1n }).complete).toBe(true);
    expect(flush(reads, { overflows: 1n }).complete).toBe(false);
  });

  it('leaves out a noted key that left the map, and reads the whole map after query_changes overflowed', () => {
    const reads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
    flush(reads);
    flush(reads);
    object.mapDelete('queries', key(3));
    note(3, 6);
    expect(queryids(flush(reads))).toEqual([6]);
    // A key could not be noted: this read is whole, and the next is not, unless it overflows again.
    const whole = flush(reads, { overflows: 1n });
    expect(whole.complete).toBe(true);
    expect(queryids(whole)).toEqual([1, 2, 4, 5, 6]);
    expect(flush(reads, { overflows: 1n }).complete).toBe(false);
    expect(flush(reads, { overflows: 2n }).complete).toBe(true);
  });

  it('reads the whole map in one batch when more than half the keys it holds are to be read', () => {
    const reads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
    for (let id = 11; id <= 16; id++) add(id, id);
    // Held now: 1, 2, 4, 5, 6 (the tests before) and 11 to 16.
    const held = 11;
    flush(reads, { held });
    flush(reads, { held });
    note(11, 12, 13);
    // Three of eleven: a lookup each.
    const few = flush(reads, { held });
    expect(few.complete).toBe(false);
    expect(queryids(few)).toEqual([11, 12, 13]);
    note(14, 15, 16);
    // The three noted and, once more, the three taken before: six of eleven, so all of them.
    const most = flush(reads, { held });
    expect(most.complete).toBe(true);
    expect(most.taken).toBe(3);
    expect(queryids(most)).toEqual([1, 2, 4, 5, 6, 11, 12, 13, 14, 15, 16]);
  });
});

describe('reading the histograms map', () => {
  function histKey(queryid: number): Buffer {
    const k = Buffer.alloc(Structs.hist_key.size);
    k.writeBigUInt64LE(BigInt(queryid), Structs.hist_key.fields['q.queryid'].offset);
    k.writeUInt32LE(10, Structs.hist_key.fields['q.userid'].offset);
    return k;
  }
  const histogram = (queryid: number) =>
    object.mapUpdate('histograms', histKey(queryid), Buffer.alloc(Math.ceil(Structs.hist.size / 8) * 8 * cpus));
  const noteHistograms = (...queryids: number[]) => {
    for (const id of queryids) object.mapUpdate('hist_changes', histKey(id), Buffer.from([1]));
  };
  const histogramQueryids = ({ batch }: ReturnType<ChangedKeyReads['read']>) =>
    Array.from({ length: batch.count }, (_, i) =>
      Number(batch.keys.readBigUInt64LE(i * batch.keySize + Structs.hist_key.fields['q.queryid'].offset)),
    ).sort((a, b) => a - b);

  it('takes the histograms noted in hist_changes, and reads the whole map first', () => {
    const reads = new ChangedKeyReads(object, globals, HISTOGRAM_CHANGES);
    for (let id = 1; id <= 10; id++) histogram(id);
    noteHistograms(3);
    const first = reads.read(() => 0n, 10);
    reads.written(true);
    expect(first.complete).toBe(true);
    expect(histogramQueryids(first)).toHaveLength(10);
    noteHistograms(7, 9);
    const few = reads.read(() => 0n, 10);
    reads.written(true);
    expect(few.complete).toBe(false);
    expect(few.taken).toBe(2);
    // The two noted and, once more, the one taken at the first read (a change racing that read).
    expect(histogramQueryids(few)).toEqual([3, 7, 9]);
    noteHistograms(5);
    expect(histogramQueryids(reads.read(() => 0n, 10))).toEqual([5, 7, 9]);
    reads.written(true);
    expect(object.mapLookupBatch('hist_changes').count).toBe(0);
  });
});
