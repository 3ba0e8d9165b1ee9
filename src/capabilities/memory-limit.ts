import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MapType, type MapInfo } from '../native/bpf-native.js';
import { memoryCgroupPath, memoryHierarchyMount } from '../postmaster/cgroup-paths.js';

/** The memory limit that holds this process: its memory cgroup's, or a smaller one above it. */
export interface MemoryLimit {
  /** The process's memory cgroup, as /proc/self/cgroup names it. */
  cgroup: string;
  /** null: no limit on it or above it. */
  limitBytes: number | null;
}

/** Where the limit is read from: /proc and the cgroup mounts (tests give their own files). */
export interface ProcFiles {
  /** /proc/self/cgroup */
  cgroup: string;
  /** /proc/self/mountinfo */
  mountinfo: string;
  /** A file's text, null when it cannot be read. */
  read(path: string): string | null;
}

/** cgroup v1 writes "no limit" as the largest page-aligned value (9223372036854771712); anything near it is none. */
const V1_UNLIMITED = 2 ** 62;

/**
 * The memory limit of the cgroup this process runs in, with its ancestors' (the kernel charges
 * against every one of them): cgroup v1's `hierarchical_memory_limit`, or the smallest
 * `memory.max` from the cgroup up on v2. null: no memory controller is mounted, or no limit can
 * be read where its cgroup would be.
 *
 * @example
 * ownMemoryLimit(); // { cgroup: '/system.slice/pg-bpf-stats.service', limitBytes: 536870912 }
 */
export function ownMemoryLimit(files: ProcFiles = procSelf()): MemoryLimit | null {
  const mount = memoryHierarchyMount(files.mountinfo);
  if (!mount) return null;
  // The v2 hierarchy has cgroup.controllers at its root; v1's memory hierarchy does not.
  const v1 = files.read(join(mount, 'cgroup.controllers')) === null;
  const cgroup = memoryCgroupPath(files.cgroup, v1);
  if (cgroup === null) return null;
  // A container without a cgroup namespace sees its cgroup's host path in /proc/self/cgroup, but
  // has that cgroup mounted as the hierarchy's root: then the root's files are its cgroup's.
  const own = files.read(join(mount, cgroup, v1 ? 'memory.stat' : 'cgroup.controllers')) !== null ? cgroup : '/';
  if (v1) {
    const stat = files.read(join(mount, own, 'memory.stat'));
    const match = /^hierarchical_memory_limit (\d+)$/m.exec(stat ?? '');
    if (!match) return null;
    const limit = Number(match[1]);
    return { cgroup, limitBytes: limit >= V1_UNLIMITED ? null : limit };
  }
  let limitBytes: number | null = null;
  // Up to the mount's root, which has a memory.max when it is a container's cgroup (the host's root has none).
  for (let dir = own; ; dir = parentOf(dir)) {
    const max = files.read(join(mount, dir, 'memory.max'))?.trim();
    if (max && max !== 'max' && (limitBytes === null || Number(max) < limitBytes)) limitBytes = Number(max);
    if (dir === '/') break;
  }
  return { cgroup, limitBytes };
}

/**
 * The kernel memory the maps take once every element is there, by the kernel's own layout: a
 * hash map's buckets, and per element its header (struct htab_elem, 48 bytes) with its key and
 * value (a pointer to them for per-CPU values), a per-CPU value once per possible CPU, each
 * rounded up to 8 bytes; arrays their values. A floor: the kernel adds the table's own struct
 * and, for maps allocated on demand, free-list links (the estimate is 0.91-1.0 of its memlock,
 * test/native/maps-full-size.test.ts); maps of other types are small and left out.
 */
export function mapsFullBytes(maps: readonly MapInfo[], cpus: number): number {
  let bytes = 0;
  for (const map of maps) {
    const key = roundUp8(map.keySize);
    const value = roundUp8(map.valueSize);
    switch (map.type) {
      case MapType.HASH:
      case MapType.LRU_HASH:
        bytes += buckets(map.maxEntries) + map.maxEntries * (HTAB_ELEM + key + value);
        break;
      case MapType.PERCPU_HASH:
      case MapType.LRU_PERCPU_HASH:
        bytes += buckets(map.maxEntries) + map.maxEntries * (HTAB_ELEM + key + 8 + value * cpus);
        break;
      case MapType.ARRAY:
        bytes += map.maxEntries * value;
        break;
      case MapType.PERCPU_ARRAY:
        bytes += map.maxEntries * value * cpus;
        break;
    }
  }
  return bytes;
}

/** sizeof(struct htab_elem) on 64-bit kernels: list node, hash, and the LRU/free-list link. */
const HTAB_ELEM = 48;

/** A hash map's bucket array: a power of two of them, 16 bytes each (struct bucket). */
function buckets(maxEntries: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, maxEntries))) * 16;
}

function roundUp8(n: number): number {
  return Math.ceil(n / 8) * 8;
}

function parentOf(dir: string): string {
  const at = dir.lastIndexOf('/');
  return at <= 0 ? '/' : dir.slice(0, at);
}

function procSelf(): ProcFiles {
  return {
    cgroup: readOr('/proc/self/cgroup') ?? '',
    mountinfo: readOr('/proc/self/mountinfo') ?? '',
    read: readOr,
  };
}

function readOr(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}
