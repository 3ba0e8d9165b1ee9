import { BSS_MAP, type CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { BssName, RodataName } from '../bpf/contract.js';

/**
 * The object's globals: `const volatile` settings written before load (.rodata), and the
 * variables user space and BPF share at run time (.bss), by name. A name the object lacks is
 * a build mismatch.
 *
 * @example
 * const globals = new ObjectGlobals(object);
 * globals.writeBss('tracking_epoch', globals.readBss('tracking_epoch') + 1n);
 */
export class ObjectGlobals {
  constructor(private readonly object: CollectorBpfObject) {}

  /** Writes `const volatile` settings; only before load. */
  writeRodata(values: Partial<Record<RodataName, number | bigint>>): void {
    const variables = new Map(this.object.rodata().map((v) => [v.name, v]));
    for (const [name, value] of Object.entries(values) as [RodataName, number | bigint][]) {
      const v = variables.get(name);
      if (!v) throw new Error(`BPF object has no setting ${name}: rebuild with npm run build`);
      const bytes = Buffer.alloc(v.size);
      if (v.size === 8) bytes.writeBigUInt64LE(BigInt.asUintN(64, BigInt(value)));
      else if (v.size === 4) bytes.writeUInt32LE(Number(BigInt.asUintN(32, BigInt(value))));
      else throw new Error(`BPF setting ${name} has unsupported size ${v.size}`);
      this.object.setRodata(v.offset, bytes);
    }
  }

  /** A global the BPF programs may change at run time (.bss); only after load. A memory read, no syscall. */
  readBss(name: BssName): bigint {
    const variable = this.bssField(name);
    const bytes = variable.size === 8 ? this.scratch8 : this.scratch4;
    this.object.readBss(variable.offset, bytes);
    return variable.size === 8 ? bytes.readBigUInt64LE(0) : BigInt(bytes.readUInt32LE(0));
  }

  /** Sets a .bss global; only after load. That variable only: what the programs write in the others (postmaster_tgid at a restart) stays. */
  writeBss(name: BssName, to: bigint): void {
    const variable = this.bssField(name);
    const bytes = Buffer.alloc(variable.size);
    if (variable.size === 8) bytes.writeBigUInt64LE(BigInt.asUintN(64, to));
    else bytes.writeUInt32LE(Number(BigInt.asUintN(32, to)));
    this.object.writeBss(variable.offset, bytes);
  }

  private readonly scratch8 = Buffer.alloc(8);
  private readonly scratch4 = Buffer.alloc(4);
  /** Where each .bss variable is, found once: the postmaster follower reads one every second. */
  private readonly bssFields = new Map<BssName, { offset: number; size: number }>();

  private bssField(name: BssName): { offset: number; size: number } {
    let field = this.bssFields.get(name);
    if (!field) {
      const variable = this.object.mapLayout(BSS_MAP).value.find((f) => f.name === name);
      if (!variable) throw new Error(`BPF object has no ${name}: rebuild with npm run build`);
      this.bssFields.set(name, (field = { offset: variable.offset, size: variable.size }));
    }
    return field;
  }
}
