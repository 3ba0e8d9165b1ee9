import type { MapBatch } from '../native/bpf-native.js';

const NO_BYTES = Buffer.alloc(0);

interface Entry<Sample> {
  sample: Sample | null;
  /** The bytes the sample was decoded from: a read's values buffer, at `at`. */
  values: Buffer;
  at: number;
  /** The last update() that had the key. */
  seenAt: number;
}

/**
 * A map as the collector knows it, key by key (queries and histograms, read by changed keys,
 * ChangedKeyReads; backends, read whole): every key it holds, with the sample last decoded for it. A read decodes an entry
 * only when its bytes differ from the last read of that key (decoding costs a bigint per field
 * per CPU, comparing one memcmp), and a whole read also says which keys are gone. So the count
 * of keys (bpf_stats.health.map_fill) is known without reading the map.
 *
 * A reused sample keeps its arrays (DeltaTracker knows an unchanged entry by that identity) but
 * takes its key from the newest read, so that no entry keeps an old read's buffers alive past
 * the next whole read.
 *
 * @example
 * const entries = new KeyedEntries<QuerySample>((sample, rawKey) => ({ ...sample, rawKey }));
 * const samples = entries.update(batch, complete, (batch, i) => decodeOne(batch, i));
 */
export class KeyedEntries<Sample> {
  private readonly entries = new Map<string, Entry<Sample>>();
  private updates = 0;

  constructor(
    /** A reused sample with the newest read's key bytes, for samples that keep them (rawKey); absent: reused as it is. */
    private readonly withKey: ((sample: Sample, rawKey: Buffer) => Sample) | null = null,
  ) {}

  /** The samples of `batch`'s entries, in its order (null where `decodeOne` gave none); `complete`: the batch is the whole map. */
  update<Decoded extends Sample | null>(batch: MapBatch, complete: boolean, decodeOne: (batch: MapBatch, i: number) => Decoded): Decoded[] {
    const { keys, keySize, values, valueSize } = batch;
    const update = ++this.updates;
    const samples = new Array<Decoded>(batch.count);
    for (let i = 0; i < batch.count; i++) {
      const id = keys.toString('latin1', i * keySize, (i + 1) * keySize);
      const at = i * valueSize;
      const before = this.entries.get(id);
      let sample: Decoded;
      if (
        before &&
        before.values.length >= before.at + valueSize &&
        values.compare(before.values, before.at, before.at + valueSize, at, at + valueSize) === 0
      ) {
        // The same bytes decode the same (a null stays null).
        const reused =
          before.sample && this.withKey ? this.withKey(before.sample, keys.subarray(i * keySize, (i + 1) * keySize)) : before.sample;
        sample = reused as Decoded;
      } else {
        sample = decodeOne(batch, i);
      }
      // An entry is updated in place: a whole read of thousands of keys every flush would
      // otherwise make as many objects, and a new Map, for the old generation to collect.
      if (before) {
        before.sample = sample;
        before.values = values;
        before.at = at;
        before.seenAt = update;
      } else {
        this.entries.set(id, { sample, values, at, seenAt: update });
      }
      samples[i] = sample;
    }
    // A whole read says which keys are gone.
    if (complete) for (const [id, entry] of this.entries) if (entry.seenAt !== update) this.entries.delete(id);
    return samples;
  }

  /** The samples are to be decoded again (other fields are read): each entry's next read decodes it. */
  forgetDecoded(): void {
    for (const entry of this.entries.values()) entry.values = NO_BYTES;
  }

  /** A key the collector deleted from the map. */
  delete(rawKey: Buffer): void {
    this.entries.delete(rawKey.toString('latin1'));
  }

  /** Keys in the map, as far as the reads and deletes since the last whole read tell. */
  get size(): number {
    return this.entries.size;
  }
}
