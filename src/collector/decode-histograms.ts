import { RecordLayout } from '../bpf/record-layout.js';
import { HistKind } from '../bpf/contract.js';
import { exactInt, type ExactInt } from '../exact-int.js';

type KindNameOf<Member> = Member extends `HIST_${infer Name}` ? Lowercase<Name> : never;
/** What a histogram measures, by its name in bpf_stats.query_histograms: enum hist_kind's member in lower case, without HIST_. */
export type HistKindName = KindNameOf<keyof typeof HistKind>;
const KIND_NAMES = new Map<number, HistKindName>(
  Object.entries(HistKind).map(([member, value]) => [value, member.slice('HIST_'.length).toLowerCase() as HistKindName]),
);
import type { MapBatch, MapLayout } from '../native/bpf-native.js';

/** One (query, kind) histogram, cumulative, summed over CPUs (max_ns: the max over CPUs). */
export interface HistogramSample {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
  kind: HistKindName;
  /** slots[i] counts observations in KERNEL_LAYOUT's slot i (histogram-layout.ts: log-linear, microseconds). */
  slots: ExactInt[];
  maxNs: bigint;
  /** The key as the map holds it (a view into the read's batch), for evicting it. */
  rawKey: Buffer;
}

/**
 * Decodes a batch read of the per-CPU `histograms` map (struct hist_key -> struct hist), with
 * field offsets from the object's BTF. A kind this collector has no name for is skipped.
 *
 * @example
 * const samples = decodeHistograms(obj.mapLookupBatch('histograms'), obj.mapLayout('histograms'), cpus);
 */
export function decodeHistograms(batch: MapBatch, layout: MapLayout, cpus: number): HistogramSample[] {
  const decodeOne = histogramDecoder(layout, cpus);
  const samples: HistogramSample[] = [];
  for (let i = 0; i < batch.count; i++) {
    const sample = decodeOne(batch, i);
    if (sample) samples.push(sample);
  }
  return samples;
}

/** Decodes entry i of a `histograms` batch read (null: a kind this collector has no name for). */
export function histogramDecoder(layout: MapLayout, cpus: number): (batch: MapBatch, i: number) => HistogramSample | null {
  const keys = RecordLayout.of('hist_key', layout.key);
  const values = RecordLayout.of('hist', layout.value);
  const slotsField = values.field('slots');
  const maxField = values.field('max_ns');
  const count = slotsField.count ?? 0;
  const elem = slotsField.elemSize ?? 8;
  return (batch, i) => {
    const stride = batch.valueSize / cpus;
    const k = i * batch.keySize;
    const kind = KIND_NAMES.get(keys.intNumber(batch.keys, k, 'kind'));
    if (!kind) return null;
    // Summed as numbers while exact: 256 slots per CPU as bigints were most of a large read's
    // time (bench/flush-scaling.js --probes latency). A slot past 2^53 goes on as a bigint.
    const slots = new Array<ExactInt>(count).fill(0);
    let maxNs = 0n;
    for (let cpu = 0; cpu < cpus; cpu++) {
      const at = i * batch.valueSize + cpu * stride + slotsField.offset;
      for (let s = 0; s < count; s++) {
        const where = at + s * elem;
        const low = batch.values.readUInt32LE(where);
        const high = elem === 8 ? batch.values.readUInt32LE(where + 4) : 0;
        if (low === 0 && high === 0) continue;
        const sum = slots[s]!;
        const value = high * 2 ** 32 + low;
        if (typeof sum === 'number' && high < 2 ** 21 && Number.isSafeInteger(sum + value)) slots[s] = sum + value;
        else slots[s] = exactInt(BigInt(sum) + (BigInt(high) << 32n) + BigInt(low));
      }
      const max = batch.values.readBigUInt64LE(at - slotsField.offset + maxField.offset);
      if (max > maxNs) maxNs = max;
    }
    return {
      queryid: keys.int(batch.keys, k, 'q.queryid'),
      userid: keys.intNumber(batch.keys, k, 'q.userid'),
      dbid: keys.intNumber(batch.keys, k, 'q.dbid'),
      toplevel: keys.intNumber(batch.keys, k, 'q.toplevel') !== 0,
      kind,
      slots,
      maxNs,
      rawKey: batch.keys.subarray(k, k + batch.keySize),
    };
  };
}
