import { describe, expect, it } from 'vitest';
import { UnchangedEntries } from '../../src/collector/unchanged-entries.js';
import type { MapBatch } from '../../src/native/bpf-native.js';

/** A batch read of a map with 4-byte keys and 8-byte values, in the given order. */
function batch(entries: Array<[key: number, value: bigint]>): MapBatch {
  const keys = Buffer.alloc(entries.length * 4);
  const values = Buffer.alloc(entries.length * 8);
  entries.forEach(([k, v], i) => {
    keys.writeUInt32LE(k, i * 4);
    values.writeBigUInt64LE(v, i * 8);
  });
  return { keys, values, count: entries.length, keySize: 4, valueSize: 8 };
}

describe('UnchangedEntries', () => {
  it('decodes only entries whose bytes changed, new keys, and keys that moved and changed', () => {
    const entries = new UnchangedEntries<{ key: number; value: bigint }>();
    const decoded: number[] = [];
    const decode = (b: MapBatch, i: number) => {
      decoded.push(b.keys.readUInt32LE(i * 4));
      return { key: b.keys.readUInt32LE(i * 4), value: b.values.readBigUInt64LE(i * 8) };
    };
    const first = entries.decode(batch([[1, 10n], [2, 20n], [3, 30n]]), decode);
    expect(decoded).toEqual([1, 2, 3]);

    decoded.length = 0;
    // 2 changed; 4 is new; 1 and 3 moved (another order, as after deletions and inserts) but kept their bytes.
    const second = entries.decode(batch([[3, 30n], [2, 21n], [4, 40n], [1, 10n]]), decode);
    expect(decoded).toEqual([2, 4]);
    expect(second.map((s) => s?.value)).toEqual([30n, 21n, 40n, 10n]);
    // The unchanged entries are the very samples decoded before.
    expect(second[0]).toBe(first[2]);
    expect(second[3]).toBe(first[0]);
  });

  it('keeps the null of an entry the decoder left out while its bytes stay the same', () => {
    const entries = new UnchangedEntries<number>();
    let calls = 0;
    const decode = (b: MapBatch, i: number) => (calls++, b.keys.readUInt32LE(i * 4) === 9 ? null : i);
    expect(entries.decode(batch([[9, 1n], [5, 2n]]), decode)).toEqual([null, 1]);
    expect(entries.decode(batch([[9, 1n], [5, 2n]]), decode)).toEqual([null, 1]);
    expect(calls).toBe(2);
  });
});
