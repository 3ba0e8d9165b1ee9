import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** One entry of a BPF map as bpftool dumps it: key bytes, and value bytes per CPU. */
export interface MapEntry {
  key: Buffer;
  /** One buffer for plain maps; one per possible CPU for per-CPU maps. */
  values: Buffer[];
}

interface BpftoolEntry {
  key: string[];
  value?: string[];
  values?: { cpu: number; value: string[] }[];
}

const bytes = (hex: string[]) => Buffer.from(hex.map((h) => parseInt(h, 16)));

/**
 * The entries of the BPF map called `name` that THIS process holds open (other collectors on
 * the host load maps of the same name), read with bpftool: a view of the kernel side that does
 * not go through the collector's own reading code.
 *
 * @example
 * const entries = dumpOwnMap('histograms');
 */
export function dumpOwnMap(name: string): MapEntry[] {
  const own = new Set<number>();
  for (const fd of readdirSync('/proc/self/fdinfo')) {
    try {
      const id = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').match(/^map_id:\s+(\d+)$/m)?.[1];
      if (id) own.add(Number(id));
    } catch {
      // closed meanwhile
    }
  }
  const maps = JSON.parse(execFileSync('bpftool', ['-j', 'map', 'show'], { encoding: 'utf8', maxBuffer: 64 << 20 })) as { id: number; name?: string }[];
  const ids = maps.filter((m) => m.name === name && own.has(m.id)).map((m) => m.id);
  if (ids.length !== 1) throw new Error(`expected one ${name} map held by this process, found ${ids.length}`);
  const dump = JSON.parse(execFileSync('bpftool', ['-j', 'map', 'dump', 'id', String(ids[0])], { encoding: 'utf8', maxBuffer: 256 << 20 })) as BpftoolEntry[];
  return dump.map((e) => ({ key: bytes(e.key), values: e.values ? e.values.map((v) => bytes(v.value)) : [bytes(e.value ?? [])] }));
}
