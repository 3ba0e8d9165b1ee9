import { describe, expect, it } from 'vitest';
import type { QuerySample } from '../../src/collector/map-samples.js';
import { KeyedEntries } from '../../src/collector/keyed-entries.js';
import type { MapBatch } from '../../src/native/bpf-native.js';

/*
 * A map as the collector knows it (KeyedEntries): an entry is decoded only when its bytes
 * changed, a partial read keeps the keys it did not read, a whole read drops the others.
 */
const KEY = 4;
const VALUE = 8;

/** A read of entries [key byte, value] as the native batch reads give them. */
function batch(entries: Array<[number, number]>): MapBatch {
  const keys = Buffer.alloc(entries.length * KEY);
  const values = Buffer.alloc(entries.length * VALUE);
  entries.forEach(([k, v], i) => {
    keys.writeUInt32LE(k, i * KEY);
    values.writeBigUInt64LE(BigInt(v), i * VALUE);
  });
  return { keys, values, count: entries.length, keySize: KEY, valueSize: VALUE };
}

function decoder() {
  const decoded: number[] = [];
  const decode = (b: MapBatch, i: number): QuerySample => {
    decoded.push(b.keys.readUInt32LE(i * KEY));
    return {
      userid: 1,
      dbid: 1,
      toplevel: true,
      queryid: BigInt(b.keys.readUInt32LE(i * KEY)),
      metrics: [b.values.readBigUInt64LE(i * VALUE)],
      waitSlots: [],
      rawKey: b.keys.subarray(i * KEY, (i + 1) * KEY),
    };
  };
  return { decoded, decode };
}

describe('KeyedEntries', () => {
  it('decodes what changed, reuses the figures of what did not, and counts the keys held', () => {
    const entries = new KeyedEntries<QuerySample>((sample, rawKey) => ({ ...sample, rawKey }));
    const { decoded, decode } = decoder();
    const first = entries.update(
      batch([
        [1, 10],
        [2, 20],
        [3, 30],
      ]),
      true,
      decode,
    );
    expect(decoded).toEqual([1, 2, 3]);
    // A partial read of two keys: only the changed one is decoded; the map still holds three.
    const second = entries.update(
      batch([
        [3, 31],
        [1, 10],
      ]),
      false,
      decode,
    );
    expect(decoded).toEqual([1, 2, 3, 3]);
    expect(second.map((s) => s.metrics[0])).toEqual([31n, 10n]);
    expect(second[1]!.metrics).toBe(first[0]!.metrics); // the same array: DeltaTracker sees it unchanged
    expect(second[1]!.rawKey.readUInt32LE(0)).toBe(1); // its key from the newest read
    expect(entries.size).toBe(3);
    // A whole read without key 2: gone.
    entries.update(
      batch([
        [1, 10],
        [3, 31],
      ]),
      true,
      decode,
    );
    expect(decoded).toEqual([1, 2, 3, 3]);
    expect(entries.size).toBe(2);
    entries.delete(Buffer.from([1, 0, 0, 0]));
    expect(entries.size).toBe(1);
  });

  it('decodes every entry again after forgetDecoded() (other fields are read)', () => {
    const entries = new KeyedEntries<QuerySample>();
    const { decoded, decode } = decoder();
    entries.update(
      batch([
        [1, 10],
        [2, 20],
      ]),
      true,
      decode,
    );
    entries.forgetDecoded();
    entries.update(batch([[2, 20]]), false, decode);
    expect(decoded).toEqual([1, 2, 2]);
    expect(entries.size).toBe(2);
  });

  it('reuses the very sample without a key to refresh (backend records), and a null for an entry left out', () => {
    const entries = new KeyedEntries<QuerySample>();
    const { decoded, decode } = decoder();
    const skipTwo = (b: MapBatch, i: number) => (b.keys.readUInt32LE(i * KEY) === 2 ? null : decode(b, i));
    const first = entries.update(
      batch([
        [1, 10],
        [2, 20],
      ]),
      true,
      skipTwo,
    );
    const second = entries.update(
      batch([
        [2, 20],
        [1, 10],
      ]),
      true,
      skipTwo,
    );
    expect(second[1]).toBe(first[0]);
    expect(second[0]).toBeNull();
    expect(decoded).toEqual([1]);
  });
});
