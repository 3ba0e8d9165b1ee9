import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { memoryCgroupPath } from '../postmaster/cgroup-paths.js';

const MEMCG_V1 = '/sys/fs/cgroup/memory';

/** The cgroup v1 memory cgroup directory `pid` is in now (/proc/<pid>/cgroup), or null. */
function memoryCgroupOf(pid: number): string | null {
  try {
    const path = memoryCgroupPath(readFileSync(`/proc/${pid}/cgroup`, 'utf8'), true);
    return path === null ? null : join(MEMCG_V1, path);
  } catch {
    return null; // gone
  }
}

/**
 * A cgroup v1 memory cgroup with a limit, for forcing memcg reclaim on chosen processes (the
 * demo's memory step, the memory integration test). remove() moves its tasks back to the
 * cgroup each came from (the root cgroup when that one is gone) before rmdir, so it cannot
 * fail on them; the pages charged here are reparented by the kernel.
 *
 * @example
 * const cg = MemoryCgroup.create('test', 64 << 20);
 * cg.add(pid);
 * // ... cg.stat().pgpgout
 * cg.remove();
 */
export class MemoryCgroup {
  /** Where each added task was before, to go back there. */
  private readonly origins = new Map<string, string>();

  private constructor(readonly dir: string) {}

  /** Whether the cgroup v1 memory controller is mounted (where create() makes its cgroup). */
  static available(): boolean {
    return existsSync(join(MEMCG_V1, 'memory.limit_in_bytes'));
  }

  /** Why create() cannot work here, or null. */
  static unavailableReason(): string | null {
    return MemoryCgroup.available() ? null : `no cgroup v1 memory controller at ${MEMCG_V1}`;
  }

  static create(name: string, limitBytes: number): MemoryCgroup {
    const dir = join(MEMCG_V1, `${name}-${process.pid}-${Date.now()}`);
    mkdirSync(dir);
    const cg = new MemoryCgroup(dir);
    try {
      writeFileSync(join(dir, 'memory.limit_in_bytes'), String(limitBytes));
    } catch (error) {
      cg.remove();
      throw error;
    }
    return cg;
  }

  add(pid: number): void {
    const origin = memoryCgroupOf(pid);
    if (origin && origin !== this.dir) this.origins.set(String(pid), origin);
    writeFileSync(join(this.dir, 'cgroup.procs'), String(pid));
  }

  /** Moves `pid` back to the cgroup it came from; what it was charged here stays charged here. */
  leave(pid: number): void {
    this.moveBack(String(pid));
    this.origins.delete(String(pid));
  }

  /** Moves `pid` to the cgroup it came from, or to the root cgroup when that one is gone or refuses it. */
  private moveBack(pid: string): void {
    const origin = this.origins.get(pid);
    for (const target of origin && existsSync(origin) ? [origin, MEMCG_V1] : [MEMCG_V1]) {
      try {
        writeFileSync(join(target, 'cgroup.procs'), pid);
        return;
      } catch {
        // exited meanwhile, or the origin refuses it: try the root
      }
    }
  }

  setLimit(bytes: number): void {
    writeFileSync(join(this.dir, 'memory.limit_in_bytes'), String(bytes));
  }

  /**
   * Sets the limit to what is charged now, so that the next charge fails. Repeated until the
   * usage stays: setting a limit drains the per-CPU charge stocks, which lowers the usage.
   */
  limitToUsage(): void {
    let limit = 0;
    for (let i = 0; i < 10 && limit !== this.usage(); i++) {
      limit = this.usage();
      this.setLimit(limit);
    }
  }

  /** Bytes charged to the cgroup now (page cache included). */
  usage(): number {
    return Number(readFileSync(join(this.dir, 'memory.usage_in_bytes'), 'utf8'));
  }

  /** Times the limit was hit. */
  failcnt(): number {
    return Number(readFileSync(join(this.dir, 'memory.failcnt'), 'utf8'));
  }

  /** memory.stat as numbers (pgpgin/pgpgout count charge events, per folio: not pages). */
  stat(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const line of readFileSync(join(this.dir, 'memory.stat'), 'utf8').split('\n')) {
      const [key, value] = line.split(' ');
      if (key && value) out[key] = Number(value);
    }
    return out;
  }

  /** Moves the tasks out (back where they came from) and removes the cgroup; idempotent. */
  remove(): void {
    if (!existsSync(this.dir)) return;
    const pids = readFileSync(join(this.dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
    for (const pid of pids) this.moveBack(pid);
    rmdirSync(this.dir);
  }
}
