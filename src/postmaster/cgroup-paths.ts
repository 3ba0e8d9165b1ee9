import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Paths remembered at most; a walk that finds more keeps the first ones (a host with that many cgroups is rare). */
const MAX_PATHS = 8192;
/** A cgroup id a walk did not find is looked for again at most this often (a walk reads every directory). */
const REWALK_INTERVAL_MS = 10_000;

/**
 * Where the memory controller's hierarchy is mounted, from mountinfo: cgroup v1's `memory`
 * hierarchy, or else the cgroup v2 mount. Null when neither is mounted.
 */
export function memoryHierarchyMount(mountinfo: string): string | null {
  let unified: string | null = null;
  for (const line of mountinfo.split('\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const [before, after] = line.split(' - ');
    const mountPoint = before?.split(' ')[4];
    if (!after || !mountPoint) continue;
    const [fstype, , superOptions = ''] = after.split(' ');
    if (fstype === 'cgroup' && superOptions.split(',').includes('memory')) return mountPoint;
    if (fstype === 'cgroup2' && unified === null) unified = mountPoint;
  }
  return unified;
}

/**
 * A process's cgroup in the memory hierarchy, from its /proc/<pid>/cgroup text: the `memory`
 * controller's line on cgroup v1, the `0::` line on v2. Null when there is none.
 */
export function memoryCgroupPath(procCgroup: string, v1: boolean): string | null {
  for (const line of procCgroup.split('\n')) {
    const [id, controllers, path] = line.split(':');
    if (path === undefined) continue;
    if (v1 ? controllers!.split(',').includes('memory') : id === '0' && controllers === '') return path;
  }
  return null;
}

/**
 * Names the memory cgroup ids BPF records per process (the kernfs inode of the cgroup's
 * directory) by their path in the memory hierarchy, as /proc/<pid>/cgroup shows it: `/` for the
 * root, `/kubepods/.../<container>` in a pod. An id first seen after the last walk (a cgroup
 * created since) causes a fresh walk at once; one a walk begun after it was seen did not find (a
 * cgroup removed before we looked) is looked for again at most every 10 s. Bounded: at most
 * MAX_PATHS paths and as many missed ids remembered.
 *
 * @example
 * const paths = CgroupPaths.forThisHost();
 * paths.pathOf(4026531835n); // '/system.slice/postgresql.service' or null
 */
export class CgroupPaths {
  private paths = new Map<bigint, string>();
  /** When the last walk began (performance.now()). */
  private lastWalkMs = -Infinity;
  /** Ids a walk did not find, and when that walk began. */
  private readonly missed = new Map<bigint, number>();

  constructor(private readonly mountPoint: string | null) {}

  static forThisHost(): CgroupPaths {
    let mountinfo = '';
    try {
      mountinfo = readFileSync('/proc/self/mountinfo', 'utf8');
    } catch {
      // no /proc: every path stays unknown
    }
    return new CgroupPaths(memoryHierarchyMount(mountinfo));
  }

  /**
   * The path of cgroup `id`, or null when it is 0 (unread), gone, or not in the hierarchy.
   * `seenAtMs` (performance.now()): when BPF's figures naming it were read, so that the ids of
   * one read cost one walk at most.
   */
  pathOf(id: bigint, seenAtMs: number = performance.now()): string | null {
    if (id === 0n || this.mountPoint === null) return null;
    const known = this.paths.get(id);
    if (known !== undefined) return known;
    const now = performance.now();
    // A walk begun after the id was seen would have found its cgroup, had it still existed.
    const missedAt = this.missed.get(id) ?? (this.lastWalkMs >= seenAtMs ? this.lastWalkMs : undefined);
    if (missedAt !== undefined && now - missedAt < REWALK_INTERVAL_MS) return null;
    this.lastWalkMs = now;
    this.paths = this.walk(this.mountPoint);
    const path = this.paths.get(id);
    if (path !== undefined) {
      this.missed.delete(id);
      return path;
    }
    if (this.missed.size >= MAX_PATHS) this.missed.clear();
    this.missed.set(id, now);
    return null;
  }

  private walk(root: string): Map<bigint, string> {
    const found = new Map<bigint, string>();
    const pending: string[] = ['/'];
    while (pending.length && found.size < MAX_PATHS) {
      const relative = pending.pop()!;
      const dir = join(root, relative);
      try {
        found.set(statSync(dir, { bigint: true }).ino, relative);
        for (const entry of readdirSync(dir, { withFileTypes: true })) {
          if (entry.isDirectory()) pending.push(join(relative, entry.name));
        }
      } catch {
        // removed while walking
      }
    }
    return found;
  }
}
