import { exactInt, type ExactInt } from '../exact-int.js';
import { Structs, type FieldOf, type StructName } from './contract.js';

/** A member of a BPF record, as the object's BTF describes it (see native mapLayout()). */
export interface BtfField {
  name: string;
  offset: number;
  size: number;
  kind: 'int' | 'array' | 'pointer' | 'enum' | 'other';
  signed: boolean;
  count?: number;
  elemSize?: number;
}

/**
 * Reads records whose layout comes from BTF, so the C header in bpf/ is the only definition
 * of a record. Built with RecordLayout.of(), field names are the generated contract's
 * (src/bpf/contract.ts): a name bpf/ does not have is a compile error, and an object on disk
 * whose layout differs from the one the collector was built against is refused by name.
 *
 * @example
 * const layout = RecordLayout.of('backend_record', obj.mapLayout('backends').value);
 * layout.int(buffer, 0, 'm.on_cpu_ns'); // bigint; 'm.on_cpu' would not compile
 */
export class RecordLayout<Name extends string = string> {
  private readonly byName = new Map<string, BtfField>();

  constructor(
    readonly fields: BtfField[],
    readonly what = 'record',
  ) {
    for (const field of fields) this.byName.set(field.name, field);
  }

  /**
   * The layout of `struct`, as the loaded object's BTF gives it (`fields`), checked against
   * the contract the collector was compiled with: every field it names must be where it says.
   */
  static of<S extends StructName>(struct: S, fields: BtfField[]): RecordLayout<FieldOf<S>> {
    const layout = new RecordLayout<FieldOf<S>>(fields, `struct ${struct}`);
    const expected: Record<string, { offset: number; size: number }> = Structs[struct].fields;
    for (const [name, want] of Object.entries(expected)) {
      const got = layout.byName.get(name);
      if (!got || got.offset !== want.offset || got.size !== want.size) {
        throw new Error(
          `struct ${struct}.${name} is ${got ? `at ${got.offset} (${got.size} bytes)` : 'missing'} in the BPF object, at ${want.offset} (${want.size} bytes) in the collector: rebuild both with npm run build`,
        );
      }
    }
    return layout;
  }

  has(name: Name): boolean {
    return this.byName.has(name);
  }

  field(name: Name): BtfField {
    const field = this.byName.get(name);
    if (!field)
      throw new Error(`${this.what} has no field ${name}: the BPF object and the collector disagree (rebuild with npm run build)`);
    return field;
  }

  /** An integer field (1, 2, 4 or 8 bytes) as a bigint. */
  int(buffer: Buffer, base: number, name: Name): bigint {
    return readInt(buffer, base, this.field(name));
  }

  /** An integer field of up to 4 bytes (an id, a pid, an enum) as a number: no bigint made. */
  intNumber(buffer: Buffer, base: number, name: Name): number {
    const field = this.field(name);
    const at = base + field.offset;
    switch (field.size) {
      case 4:
        return field.signed ? buffer.readInt32LE(at) : buffer.readUInt32LE(at);
      case 2:
        return field.signed ? buffer.readInt16LE(at) : buffer.readUInt16LE(at);
      case 1:
        return field.signed ? buffer.readInt8(at) : buffer.readUInt8(at);
      default:
        throw new Error(`field ${field.name} is ${field.size} bytes: read it with int()`);
    }
  }

  /**
   * Sums integer fields over the per-CPU copies of one value: `stride` bytes apart, `cpus` of them
   * (the layout the kernel uses for per-CPU maps; 1 for a plain value).
   */
  sumPerCpu(buffer: Buffer, base: number, stride: number, cpus: number, names: readonly Name[]): ExactInt[] {
    let fields = this.fieldLists.get(names);
    if (!fields) this.fieldLists.set(names, (fields = names.map((n) => this.field(n))));
    const n = fields.length;
    const sums = new Array<ExactInt>(n);
    // A flush decodes every changed query this way (10,000 in one flush is a goal): unsigned
    // 8-byte counters are summed as two 32-bit halves in doubles, a bigint only past 2^53.
    for (let i = 0; i < n; i++) {
      const field = fields[i]!;
      if (field.size !== 8 || field.signed) {
        let sum = 0n;
        for (let cpu = 0; cpu < cpus; cpu++) sum += readInt(buffer, base + cpu * stride, field);
        sums[i] = exactInt(sum);
        continue;
      }
      let low = 0;
      let high = 0;
      for (let cpu = 0, at = base + field.offset; cpu < cpus; cpu++, at += stride) {
        low += buffer.readUInt32LE(at);
        high += buffer.readUInt32LE(at + 4);
      }
      const sum = high * 4294967296 + low;
      sums[i] = sum <= Number.MAX_SAFE_INTEGER ? sum : (BigInt(high) << 32n) + BigInt(low);
    }
    return sums;
  }

  /** The fields of each names list sumPerCpu was given (callers pass the same list every time). */
  private readonly fieldLists = new WeakMap<readonly Name[], BtfField[]>();
}

function readInt(buffer: Buffer, base: number, field: BtfField): bigint {
  const at = base + field.offset;
  switch (field.size) {
    case 8:
      return field.signed ? buffer.readBigInt64LE(at) : buffer.readBigUInt64LE(at);
    case 4:
      return BigInt(field.signed ? buffer.readInt32LE(at) : buffer.readUInt32LE(at));
    case 2:
      return BigInt(field.signed ? buffer.readInt16LE(at) : buffer.readUInt16LE(at));
    case 1:
      return BigInt(field.signed ? buffer.readInt8(at) : buffer.readUInt8(at));
    default:
      throw new Error(`field ${field.name} is ${field.size} bytes, not an integer`);
  }
}
