import type { MapBatch } from '../native/bpf-native.js';

/**
 * Decodes a map read, reusing the decoded sample of every entry whose key and value bytes are
 * the same as in the previous read: comparing an entry costs two memcmp, decoding it a bigint per
 * field per CPU. So a flush decodes what changed, not what the map holds (a full histograms map
 * of 8192 of which 100 moved decodes 100). The queries map is read by key instead (QueryEntries).
 *
 * A reused sample is the same object as before, with the same arrays: callers must not change
 * them (DeltaTracker keeps them as baselines, and knows an unchanged entry by that identity).
 * The previous read is matched position by position first (a hash map nobody inserted into
 * reads back in the same order), and by the key's bytes when an entry moved.
 *
 * @example
 * const histograms = new UnchangedEntries<HistogramSample>();
 * const samples = histograms.decode(object.mapLookupBatch('histograms'), (batch, i) => decodeOne(batch, i));
 */
export class UnchangedEntries<Sample> {
  private previous: { batch: MapBatch; samples: Array<Sample | null>; index: Map<string, number> | null } | null = null;

  /** One sample per entry of `batch` (null where `decodeOne` gave none), in the batch's order. */
  decode(batch: MapBatch, decodeOne: (batch: MapBatch, i: number) => Sample | null): Array<Sample | null> {
    const before = this.previous;
    const comparable = before !== null && before.batch.keySize === batch.keySize && before.batch.valueSize === batch.valueSize;
    const { values, valueSize } = batch;
    const samples = new Array<Sample | null>(batch.count);
    for (let i = 0; i < batch.count; i++) {
      const j = comparable ? this.match(before, batch, i) : -1;
      const v = i * valueSize;
      const w = j * valueSize;
      const same = j >= 0 && values.compare(before!.batch.values, w, w + valueSize, v, v + valueSize) === 0;
      samples[i] = same ? (before!.samples[j] ?? null) : decodeOne(batch, i);
    }
    this.previous = { batch, samples, index: null };
    return samples;
  }

  /** The position in the previous read of entry `i`'s key, or -1. */
  private match(before: NonNullable<UnchangedEntries<Sample>['previous']>, batch: MapBatch, i: number): number {
    const size = batch.keySize;
    const k = i * size;
    if (i < before.batch.count && batch.keys.compare(before.batch.keys, k, k + size, k, k + size) === 0) return i;
    if (!before.index) {
      before.index = new Map();
      for (let j = 0; j < before.batch.count; j++) before.index.set(before.batch.keys.toString('latin1', j * size, (j + 1) * size), j);
    }
    return before.index.get(batch.keys.toString('latin1', k, k + size)) ?? -1;
  }
}
