import { describe, expect, it } from 'vitest';
import { BackendFlags, Structs } from '../../src/bpf/contract.js';
import { RecordLayout, type BtfField } from '../../src/bpf/record-layout.js';

const fields: BtfField[] = [
  { name: 'm.total_ns', offset: 0, size: 8, kind: 'int', signed: false },
  { name: 'm.calls', offset: 8, size: 8, kind: 'int', signed: false },
  { name: 'pid', offset: 16, size: 4, kind: 'int', signed: false },
  { name: 'backend_type', offset: 20, size: 4, kind: 'int', signed: true },
  { name: 'hist', offset: 24, size: 16, kind: 'array', signed: false, count: 2, elemSize: 8 },
];

describe('RecordLayout', () => {
  const layout = new RecordLayout(fields, 'struct test');

  it('reads integers by name at their BTF offsets, honouring sign', () => {
    const record = Buffer.alloc(48);
    record.writeBigUInt64LE(0xffff_ffff_ffff_fff0n, 0);
    record.writeBigUInt64LE(7n, 8);
    record.writeUInt32LE(4242, 16);
    record.writeInt32LE(-1, 20);
    expect(layout.int(record, 0, 'm.total_ns')).toBe(0xffff_ffff_ffff_fff0n);
    expect(layout.int(record, 0, 'm.calls')).toBe(7n);
    expect(layout.int(record, 0, 'pid')).toBe(4242n);
    expect(layout.int(record, 0, 'backend_type')).toBe(-1n);
    // Narrow fields as numbers, the same values; an 8-byte one is refused, never rounded.
    record.writeUInt32LE(0xffff_fffe, 16);
    expect(layout.intNumber(record, 0, 'pid')).toBe(0xffff_fffe);
    expect(layout.intNumber(record, 0, 'backend_type')).toBe(-1);
    expect(() => layout.intNumber(record, 0, 'm.calls')).toThrow(/8 bytes/);
  });

  it('sums per-CPU copies of a value', () => {
    const stride = 48;
    const values = Buffer.alloc(stride * 3);
    [5n, 10n, 20n].forEach((v, cpu) => {
      values.writeBigUInt64LE(v, cpu * stride);
      values.writeBigUInt64LE(1n, cpu * stride + 8);
    });
    expect(layout.sumPerCpu(values, 0, stride, 3, ['m.total_ns', 'm.calls'])).toEqual([35, 3]);
  });

  it('sums per-CPU copies exactly past 2^32 and past 2^53, and signed or narrow fields too', () => {
    const stride = 48;
    const values = Buffer.alloc(stride * 3);
    const big = [0xffff_ffffn, 0x1_0000_0001n, 0x1f_ffff_ffff_ffffn];
    const huge = [0xffff_ffff_ffff_fff0n, 0x0fn, 0n];
    for (let cpu = 0; cpu < 3; cpu++) {
      values.writeBigUInt64LE(big[cpu]!, cpu * stride);
      values.writeBigUInt64LE(huge[cpu]!, cpu * stride + 8);
      values.writeUInt32LE(cpu + 1, cpu * stride + 16);
      values.writeInt32LE(-2, cpu * stride + 20);
    }
    const sum = (xs: bigint[]) => xs.reduce((a, b) => a + b, 0n);
    // A number while exact (the narrow fields), a bigint past 2^53.
    expect(sum(big)).toBeGreaterThan(2n ** 53n);
    expect(layout.sumPerCpu(values, 0, stride, 3, ['m.total_ns', 'm.calls', 'pid', 'backend_type'])).toEqual([sum(big), sum(huge), 6, -6]);
    // Past 2^32 but below 2^53 in all: a number, exact.
    const small = Buffer.alloc(stride * 3);
    for (let cpu = 0; cpu < 3; cpu++) small.writeBigUInt64LE(0x7_ffff_ffff_ffffn + BigInt(cpu), cpu * stride);
    expect(layout.sumPerCpu(small, 0, stride, 3, ['m.total_ns'])).toEqual([3 * 0x7_ffff_ffff_ffff + 3]);
  });

  it('names the missing field when the object and the collector disagree', () => {
    expect(() => layout.int(Buffer.alloc(48), 0, 'm.nope')).toThrow(/struct test has no field m.nope/);
  });

  it('refuses to read a non-integer as an integer', () => {
    expect(() => layout.int(Buffer.alloc(48), 0, 'hist')).toThrow(/not an integer/);
  });
});

describe('RecordLayout.of', () => {
  const queryKey = (): BtfField[] =>
    Object.entries(Structs.query_key.fields).map(([name, f]) => ({ name, offset: f.offset, size: f.size, kind: 'int', signed: f.signed }));

  it('reads a struct whose BTF layout is the one the collector was built against', () => {
    const record = Buffer.alloc(Structs.query_key.size);
    record.writeUInt32LE(16384, Structs.query_key.fields.dbid.offset);
    expect(RecordLayout.of('query_key', queryKey()).int(record, 0, 'dbid')).toBe(16384n);
  });

  it('refuses an object whose layout moved a field, naming it', () => {
    const moved = queryKey().map((f) => (f.name === 'dbid' ? { ...f, offset: f.offset + 4 } : f));
    expect(() => RecordLayout.of('query_key', moved)).toThrow(/struct query_key\.dbid is at \d+ .* rebuild/);
  });

  it('reads an enum-typed field (BTF kind enum) as the integer it is', () => {
    const flags = Structs.backend_record.fields.flags;
    const fields: BtfField[] = [{ name: 'flags', offset: 0, size: flags.size, kind: 'enum', signed: flags.signed }];
    const record = Buffer.alloc(flags.size);
    record.writeUInt32LE(BackendFlags.BACKEND_EXCLUDED | BackendFlags.BACKEND_IDENTITY_KNOWN);
    expect(new RecordLayout(fields).int(record, 0, 'flags')).toBe(3n);
  });
});
