import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const MEMCG_V1 = '/sys/fs/cgroup/memory';

/**
 * A cgroup v1 memory cgroup with a limit, for forcing memcg reclaim on chosen processes.
 * remove() moves its tasks back to the root cgroup first, so rmdir cannot fail on them.
 *
 * @example
 * const cg = MemoryCgroup.create('test', 64 << 20);
 * cg.add(pid);
 * // ... cg.stat().pgpgout
 * cg.remove();
 */
export class MemoryCgroup {
  private constructor(readonly dir: string) {}

  static available(): boolean {
    return existsSync(join(MEMCG_V1, 'memory.limit_in_bytes'));
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
    writeFileSync(join(this.dir, 'cgroup.procs'), String(pid));
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

  remove(): void {
    if (!existsSync(this.dir)) return;
    const pids = readFileSync(join(this.dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
    for (const pid of pids) {
      try {
        writeFileSync(join(MEMCG_V1, 'cgroup.procs'), pid);
      } catch {
        // exited meanwhile
      }
    }
    rmdirSync(this.dir);
  }
}
