import { describe, expect, it } from 'vitest';
import { percpuOffsets } from '../../src/postmaster/kernel-percpu.js';

/** A BTF blob: an int, a struct with one member (trailing bytes to skip), two VARs, and `.data..percpu` holding them. */
function btfBlob(vars: Array<{ name: string; offset: number }>, section = '.data..percpu'): Buffer {
  const strings = ['', 'int', 's', 'm', section, ...vars.map((v) => v.name)];
  const stringOffsets: number[] = [];
  let size = 0;
  for (const s of strings) {
    stringOffsets.push(size);
    size += Buffer.byteLength(s) + 1;
  }
  const strs = Buffer.concat(strings.map((s) => Buffer.from(`${s}\0`, 'latin1')));
  const words: number[] = [];
  const type = (nameOff: number, kind: number, vlen: number, sizeOrType: number, ...trailing: number[]) =>
    words.push(nameOff, ((kind << 24) | vlen) >>> 0, sizeOrType, ...trailing);
  type(stringOffsets[1]!, 1, 0, 4, 0x20); // [1] INT int
  type(stringOffsets[2]!, 4, 1, 4, stringOffsets[3]!, 1, 0); // [2] STRUCT s { int m; }
  for (let i = 0; i < vars.length; i++) type(stringOffsets[5 + i]!, 14, 0, 1, 1); // [3..] VAR
  type(stringOffsets[4]!, 15, vars.length, 1 << 20, ...vars.flatMap((v, i) => [3 + i, v.offset, 4])); // DATASEC
  const types = Buffer.alloc(words.length * 4);
  for (const [i, w] of words.entries()) types.writeUInt32LE(w, i * 4);
  const header = Buffer.alloc(24);
  header.writeUInt16LE(0xeb9f, 0);
  header.writeUInt8(1, 2);
  header.writeUInt32LE(24, 4);
  header.writeUInt32LE(0, 8);
  header.writeUInt32LE(types.length, 12);
  header.writeUInt32LE(types.length, 16);
  header.writeUInt32LE(strs.length, 20);
  return Buffer.concat([header, types, strs]);
}

describe('percpuOffsets', () => {
  it('finds per-CPU variables by name in .data..percpu, past types with trailing bytes', () => {
    const blob = btfBlob([
      { name: 'runqueues', offset: 179392 },
      { name: '__preempt_count', offset: 86064 },
    ]);
    expect(percpuOffsets(blob, ['runqueues', '__preempt_count', 'absent'])).toEqual(
      new Map([
        ['runqueues', 179392],
        ['__preempt_count', 86064],
      ]),
    );
  });

  it('finds nothing in another section, or in a blob that is not BTF', () => {
    expect(percpuOffsets(btfBlob([{ name: 'runqueues', offset: 8 }], '.data'), ['runqueues']).size).toBe(0);
    expect(percpuOffsets(Buffer.from('not btf at all, long enough'), ['runqueues']).size).toBe(0);
  });
});
