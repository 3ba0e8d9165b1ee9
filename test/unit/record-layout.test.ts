import { describe, expect, it } from 'vitest';
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
  });

  it('sums per-CPU copies of a value', () => {
    const stride = 48;
    const values = Buffer.alloc(stride * 3);
    [5n, 10n, 20n].forEach((v, cpu) => {
      values.writeBigUInt64LE(v, cpu * stride);
      values.writeBigUInt64LE(1n, cpu * stride + 8);
    });
    expect(layout.sumPerCpu(values, 0, stride, 3, ['m.total_ns', 'm.calls'])).toEqual([35n, 3n]);
  });

  it('names the missing field when the object and the collector disagree', () => {
    expect(() => layout.int(Buffer.alloc(48), 0, 'm.nope')).toThrow(/struct test has no field m.nope/);
  });

  it('refuses to read a non-integer as an integer', () => {
    expect(() => layout.int(Buffer.alloc(48), 0, 'hist')).toThrow(/not an integer/);
  });
});
