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
const hex = (b: Buffer) => [...b].map((x) => x.toString(16).padStart(2, '0'));

/**
 * The entries of the BPF map called `name` that THIS process holds open (other collectors on
 * the host load maps of the same name), or that the process `holder` holds (a collector run as a
 * child), read with bpftool: a view of the kernel side that does not go through the collector's
 * own reading code.
 *
 * @example
 * const entries = dumpOwnMap('histograms');
 */
export function dumpOwnMap(name: string, holder: number | 'self' = 'self'): MapEntry[] {
  const dump = JSON.parse(
    execFileSync('bpftool', ['-j', 'map', 'dump', 'id', String(ownMapId(name, holder))], { encoding: 'utf8', maxBuffer: 256 << 20 }),
  ) as BpftoolEntry[];
  return dump.map((e) => ({ key: bytes(e.key), values: e.values ? e.values.map((v) => bytes(v.value)) : [bytes(e.value ?? [])] }));
}

/** Writes one entry of THIS process's map `name` with bpftool (a plain, not per-CPU, map), as if BPF had. */
export function updateOwnMap(name: string, key: Buffer, value: Buffer): void {
  execFileSync('bpftool', ['map', 'update', 'id', String(ownMapId(name)), 'key', 'hex', ...hex(key), 'value', 'hex', ...hex(value)]);
}

/** Deletes one entry of THIS process's map `name` with bpftool. */
export function deleteFromOwnMap(name: string, key: Buffer): void {
  execFileSync('bpftool', ['map', 'delete', 'id', String(ownMapId(name)), 'key', 'hex', ...hex(key)]);
}

/** The names of the BPF programs this process holds open (the collector's, when it runs in the test's process). */
export function ownProgramNames(): string[] {
  const own = ownIds('prog_id');
  const programs = JSON.parse(execFileSync('bpftool', ['-j', 'prog', 'show'], { encoding: 'utf8', maxBuffer: 64 << 20 })) as {
    id: number;
    name?: string;
  }[];
  return programs.filter((p) => own.has(p.id)).map((p) => p.name ?? '');
}

/** The id of the BPF map called `name` that this process (or `holder`) holds open. */
function ownMapId(name: string, holder: number | 'self' = 'self'): number {
  const own = ownIds('map_id', holder);
  const maps = JSON.parse(execFileSync('bpftool', ['-j', 'map', 'show'], { encoding: 'utf8', maxBuffer: 64 << 20 })) as {
    id: number;
    name?: string;
  }[];
  const ids = maps.filter((m) => m.name === name && own.has(m.id)).map((m) => m.id);
  if (ids.length !== 1)
    throw new Error(`expected one ${name} map held by ${holder === 'self' ? 'this process' : `process ${holder}`}, found ${ids.length}`);
  return ids[0]!;
}

/** Ids of the BPF maps or programs behind the open fds of this process or `holder` (/proc/<pid>/fdinfo). */
function ownIds(field: 'map_id' | 'prog_id', holder: number | 'self' = 'self'): Set<number> {
  const own = new Set<number>();
  const pattern = new RegExp(`^${field}:\\s+(\\d+)$`, 'm');
  for (const fd of readdirSync(`/proc/${holder}/fdinfo`)) {
    try {
      const id = readFileSync(`/proc/${holder}/fdinfo/${fd}`, 'utf8').match(pattern)?.[1];
      if (id) own.add(Number(id));
    } catch {
      // closed meanwhile
    }
  }
  return own;
}
