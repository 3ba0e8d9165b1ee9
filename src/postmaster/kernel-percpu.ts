import { readFileSync } from 'node:fs';
import { btfTypeTail } from '../btf-type-record.js';

/** BTF kinds (include/uapi/linux/btf.h) this reader looks for. */
const BTF_KIND_VAR = 14;
const BTF_KIND_DATASEC = 15;

/**
 * Offsets of per-CPU variables inside the kernel's per-CPU section (`.data..percpu`), by name,
 * from a BTF blob (the kernel's own: /sys/kernel/btf/vmlinux). A variable's address on one CPU is
 * that CPU's per-CPU base plus its offset, so two variables' offsets give one's address from the
 * other's: BPF reaches this CPU's preempt count from its run queue (bpf/wait-blockers.bpf.h) on a
 * kernel whose /proc/kallsyms lists no data symbols (no CONFIG_KALLSYMS_ALL), where a __ksym
 * variable cannot be loaded. Variables not found are left out; a blob that is not BTF gives none.
 *
 * @example
 * percpuOffsets(readFileSync('/sys/kernel/btf/vmlinux'), ['runqueues', '__preempt_count']);
 */
export function percpuOffsets(btf: Buffer, names: readonly string[]): Map<string, number> {
  const found = new Map<string, number>();
  if (btf.length < 24 || btf.readUInt16LE(0) !== 0xeb9f) return found;
  const hdrLen = btf.readUInt32LE(4);
  const typesStart = hdrLen + btf.readUInt32LE(8);
  const typesEnd = typesStart + btf.readUInt32LE(12);
  const stringsStart = hdrLen + btf.readUInt32LE(16);
  const name = (off: number): string => {
    const end = btf.indexOf(0, stringsStart + off);
    return btf.toString('latin1', stringsStart + off, end < 0 ? undefined : end);
  };
  // Type ids start at 1; a DATASEC names its variables by id, so each VAR's name is kept by id.
  const varNames = new Map<number, number>();
  const datasecs: number[] = [];
  let id = 1;
  for (let at = typesStart; at + 12 <= typesEnd; id++) {
    const info = btf.readUInt32LE(at + 4);
    const kind = (info >>> 24) & 0x1f;
    const vlen = info & 0xffff;
    if (kind === BTF_KIND_VAR) varNames.set(id, btf.readUInt32LE(at));
    else if (kind === BTF_KIND_DATASEC && name(btf.readUInt32LE(at)) === '.data..percpu') datasecs.push(at);
    const tail = btfTypeTail(kind, vlen);
    if (tail === null) break; // a kind newer than this reader: the rest cannot be walked
    at += 12 + tail;
  }
  const wanted = new Set(names);
  for (const at of datasecs) {
    const vlen = btf.readUInt32LE(at + 4) & 0xffff;
    for (let i = 0; i < vlen; i++) {
      const entry = at + 12 + 12 * i;
      const nameOff = varNames.get(btf.readUInt32LE(entry));
      if (nameOff === undefined) continue;
      const varName = name(nameOff);
      if (wanted.has(varName)) found.set(varName, btf.readUInt32LE(entry + 4));
    }
  }
  return found;
}

let hostOffsets: Map<string, number> | undefined;

/** percpuOffsets of this host's kernel (read once); none when its BTF cannot be read. */
export function hostPercpuOffsets(names: readonly string[]): Map<string, number> {
  if (!hostOffsets) {
    try {
      hostOffsets = percpuOffsets(readFileSync('/sys/kernel/btf/vmlinux'), ['runqueues', '__preempt_count']);
    } catch {
      hostOffsets = new Map();
    }
  }
  return new Map(names.flatMap((n) => (hostOffsets!.has(n) ? [[n, hostOffsets!.get(n)!] as const] : [])));
}
