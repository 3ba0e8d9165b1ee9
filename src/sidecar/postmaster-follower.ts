import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { oneLine, UserError } from '../errors.js';
import type { BpfPostmaster, CollectorObject } from '../collector/collector-object.js';
import { mappingStart } from '../postmaster/process-memory.js';
import type { PostmasterTarget } from '../postmaster/postmaster-target.js';
import { procStat } from '../postmaster/proc-stat.js';
import { kernelFileId, namespaceOf, pgPidOf, sameMountNamespace, type KernelFileId } from '../postmaster/pid-namespace.js';

/*
 * Following the postmaster across restarts (pg_ctl restart -m fast / immediate, a crash, a
 * container restart) without reloading or re-attaching anything.
 *
 * The probes do not depend on the postmaster's pid: tracepoints are global and uprobes/USDT
 * are attached to the binary's inode for every process (pid -1). Only the BPF filter
 * (postmaster_tgid, pidns_level) and where the children keep MyBEEntry (ASLR) name one
 * postmaster, and they are variables. The handover happens in the kernel (bpf/instance.bpf.h):
 * the filter goes to nothing when the postmaster exits, and to its successor (same binary
 * inode, same data directory inode) at the successor's first fork, long before it accepts a
 * connection. This class reads that state (one .bss variable every 100 ms), confirms with /proc
 * once a second, catches up with what user space keeps (the target's pids and paths, the
 * exclusions), and falls back to searching /proc when BPF did not adopt a successor within
 * 200 ms. The maps, the delta trackers and everything collected stay: nothing is counted twice,
 * nothing the old postmaster's backends did is dropped (the flush loop writes it once the
 * server answers).
 */

/*
 * How often BPF's view of the postmaster is read (a memory read: the handover itself happens in
 * the kernel): every second while all is well, every 100 ms for a while once something suggests
 * a restart (hurry(): the collector's connection to the server dropped, a flush failed), so that
 * an idle collector wakes once a second rather than ten times. Then how often /proc confirms it
 * lives (for a postmaster BPF saw no exit of), and how often /proc is searched while it is gone
 * (the fallback when BPF does not adopt the successor).
 */
const QUIET_WATCH_MS = 1000;
const WATCH_MS = 100;
const HURRY_MS = 10_000;
const PROC_CHECK_MS = 1000;
const SEARCH_MS = 5;
/** BPF adopts the successor at its first fork; /proc is searched only when it has not after this long. */
const FALLBACK_AFTER_MS = 200;

const fileId = kernelFileId;
const same = (a: KernelFileId | null, b: KernelFileId | null) => a !== null && b !== null && a.dev === b.dev && a.ino === b.ino;

export interface FollowerOptions {
  target: PostmasterTarget;
  object: CollectorObject<string>;
  /** What BPF filters on now (from start-up). */
  current: BpfPostmaster;
  /** How long to wait for a new postmaster before giving up. */
  waitMs: number;
  log: (line: string) => void;
  /** The filter points at a new postmaster; `target` was updated in place. */
  onFollowed: (target: PostmasterTarget, gapMs: number, adoptedByBpf: boolean) => void;
  /** The postmaster is gone for good, or came back as something we cannot follow. */
  onLost: (error: UserError) => void;
}

/**
 * Watches the postmaster; when it goes, finds its successor and retargets the BPF object.
 *
 * @example
 * const follower = new PostmasterFollower({ target, object, current, waitMs: 60_000, log, onFollowed, onLost });
 * follower.start();
 */
export class PostmasterFollower {
  private timer: NodeJS.Timeout | null = null;
  private readonly dataDir: KernelFileId;
  private readonly binary: KernelFileId;
  /** mm->start_code of the postmaster followed (the addresses BPF holds belong to it). */
  private startCode: bigint;
  /** Stops BPF's own following (on_postmaster_exit, adopt_postmaster). */
  private stopBpf: (() => void) | null = null;
  private lastProcCheck = 0;
  private startTicks: number;
  private goneAt: number | null = null;
  private searching = false;
  /** close() was called: a search under way ends at its next step, touching nothing more. */
  private closed = false;
  /** Where the binary is mapped in the postmaster we filter on (its maps go with it). */
  private base: bigint;
  /** Times the postmaster was followed (tests and health). */
  restarts = 0;

  constructor(private readonly options: FollowerOptions) {
    const pid = options.target.pid;
    const dataDir = fileId(`/proc/${pid}/cwd`);
    const binary = fileId(`/proc/${pid}/exe`);
    const stat = procStat(pid);
    if (!dataDir || !binary || !stat) throw new UserError(`postmaster ${pid} is not readable (needs CAP_SYS_PTRACE)`);
    this.dataDir = dataDir;
    this.binary = binary;
    this.startTicks = stat.startTicks;
    this.startCode = stat.startCode;
    const base = mappingStart(pid, options.target.mappedPath);
    if (base === null) throw new UserError(`postmaster ${pid} does not map ${options.target.mappedPath}`);
    this.base = base;
  }

  start(): void {
    this.stopBpf ??= this.options.object.followPostmaster({ exe: this.binary, dir: this.dataDir, startCode: this.startCode });
    this.watch();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** A restart may be under way (the server connection dropped, a flush failed): watch every 100 ms for a while. */
  hurry(): void {
    this.hurryUntil = performance.now() + HURRY_MS;
    if (this.timer) this.watch();
  }

  private hurryUntil = 0;

  /** The next check, at the cadence of the moment; a check that found the postmaster gone stops watching (search() takes over). */
  private watch(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(
      () => {
        this.timer = null;
        if (this.check()) this.watch();
      },
      performance.now() < this.hurryUntil ? WATCH_MS : QUIET_WATCH_MS,
    );
    this.timer.unref();
  }

  /** Detaches BPF's following too (the collector stops). */
  close(): void {
    this.closed = true;
    this.stop();
    this.stopBpf?.();
    this.stopBpf = null;
  }

  /** Whether the postmaster we filter on is alive; when not, follows its successor. */
  check(): boolean {
    if (this.closed || this.goneAt !== null) return false;
    const { object, target, current } = this.options;
    if (object.bpfPostmasterTgid() === current.tgid) {
      // BPF sees no exit of a process that was never scheduled out while attached; /proc does.
      if (performance.now() - this.lastProcCheck < PROC_CHECK_MS) return true;
      this.lastProcCheck = performance.now();
      const stat = procStat(target.pid);
      if (stat && stat.startTicks === this.startTicks && stat.state !== 'Z' && stat.state !== 'X') return true;
      object.retarget(null);
    }
    // Gone (BPF already points at nothing, or at the successor it adopted).
    this.goneAt = performance.now();
    object.forgetExcluded();
    this.options.log(
      `postmaster ${target.pgPid} is gone: waiting up to ${this.options.waitMs / 1000} s for a new one in the same data directory`,
    );
    this.stop();
    void this.search();
    return false;
  }

  private async search(): Promise<void> {
    if (this.searching) return;
    this.searching = true;
    const deadline = this.goneAt! + this.options.waitMs;
    try {
      while (!this.closed && performance.now() < deadline && this.goneAt !== null) {
        const adopted = this.options.object.bpfPostmasterTgid() !== null;
        const found = adopted || performance.now() - this.goneAt! > FALLBACK_AFTER_MS ? this.findSuccessor() : null;
        if (found === 'other-binary') {
          this.options.onLost(
            new UserError(
              `postmaster restarted from another binary than ${this.options.target.mappedPath} (an upgrade?): start pg-bpf-stats again to attach to it`,
            ),
          );
          return;
        }
        if (found !== null && (await this.follow(found))) return;
        await new Promise((resolve) => setTimeout(resolve, SEARCH_MS));
      }
      if (this.closed) return;
      this.options.onLost(
        new UserError(
          `postmaster ${this.options.target.pgPid} is gone and no new one started in its data directory within ${this.options.waitMs / 1000} s`,
        ),
      );
    } catch (error) {
      // The collector closed its BPF object while a step of the search waited: nothing is left to follow.
      if (!this.closed) this.options.onLost(new UserError(`cannot follow the postmaster: ${oneLine(error)}`));
    } finally {
      this.searching = false;
    }
  }

  /**
   * The new postmaster: a process in the data directory whose parent is not (its children share
   * the directory and the binary), and which postmaster.pid names. 'other-binary' when it runs
   * another postgres binary.
   */
  private findSuccessor(): number | 'other-binary' | null {
    const inDataDir = new Map<number, number>();
    for (const entry of readdirSync('/proc')) {
      const pid = Number(entry);
      if (!Number.isInteger(pid) || pid <= 0) continue;
      if (!same(fileId(`/proc/${pid}/cwd`), this.dataDir)) continue;
      const stat = procStat(pid);
      if (stat && stat.state !== 'Z') inDataDir.set(pid, stat.ppid);
    }
    for (const [pid, ppid] of inDataDir) {
      if (inDataDir.has(ppid)) continue;
      let exe: string;
      try {
        exe = readlinkSync(`/proc/${pid}/exe`);
      } catch {
        continue;
      }
      if (!/\/(postgres|postmaster)$/.test(exe)) continue; // pg_ctl, a shell, ... in that directory
      if (!this.namedInPidFile(pid)) continue;
      return same(fileId(`/proc/${pid}/exe`), this.binary) ? pid : 'other-binary';
    }
    return null;
  }

  /**
   * Whether the data directory's postmaster.pid names `pid`. A backend the old postmaster left
   * behind (killed, it no longer has a parent there) is in the same directory and runs the same
   * binary until it notices, which a CPU-bound statement delays for as long as it runs; the file
   * names the old postmaster until the successor writes it, early in its start.
   */
  private namedInPidFile(pid: number): boolean {
    const pgPid = this.options.target.procShowsPgPids ? pid : pgPidOf(pid);
    try {
      return pgPid !== null && Number(readFileSync(`/proc/${pid}/cwd/postmaster.pid`, 'utf8').split('\n')[0]) === pgPid;
    } catch {
      return false; // gone, or the file is being rewritten: the next search looks again
    }
  }

  private async follow(pid: number): Promise<boolean> {
    const { target, object, current } = this.options;
    const start = mappingStart(pid, target.mappedPath);
    const stat = procStat(pid);
    const pgPid = target.procShowsPgPids ? pid : pgPidOf(pid);
    if (start === null || !stat || !pgPid) return false; // not mapped yet: the next search will see it
    // ASLR: the new postmaster maps the binary elsewhere; the globals move with the mapping.
    const bias = this.base;
    const pidns = namespaceOf(pid, 'pid');
    // Adopted by BPF at its first fork already, or found here: then BPF names it. The
    // postmaster switches out many times while it starts (forks, waits for the startup
    // process), so no connection is needed to make it run.
    const adopted = object.bpfPostmaster();
    const found = adopted ?? (await object.findTgid({ ...pidns, tgid: pgPid }, async () => undefined, 2000));
    // BPF may have adopted it while findTgid looked: then its own addresses stand.
    if (!found || this.closed) return false;
    const moved = (address: bigint) => (address === 0n ? 0n : address - bias + start);
    const next: BpfPostmaster = {
      tgid: found.tgid,
      level: found.level,
      myBEEntry: moved(current.myBEEntry),
      myWaitEventInfo: moved(current.myWaitEventInfo),
      outerUserId: moved(current.outerUserId),
      currentUserId: moved(current.currentUserId),
      activePortal: moved(current.activePortal),
    };
    object.retarget(next);
    Object.assign(current, next);
    this.base = start;
    this.startCode = stat.startCode;
    Object.assign(target, {
      pid,
      pgPid,
      pidns,
      binaryPath: sameMountNamespace(pid) ? target.mappedPath : `/proc/${pid}/root${target.mappedPath}`,
      addresses: {
        myBEEntry: next.myBEEntry,
        myWaitEventInfo: next.myWaitEventInfo,
        outerUserId: next.outerUserId,
        currentUserId: next.currentUserId,
        activePortal: next.activePortal,
      },
    });
    this.startTicks = stat.startTicks;
    const gapMs = performance.now() - this.goneAt!;
    this.goneAt = null;
    this.restarts++;
    this.options.onFollowed(target, gapMs, adopted !== null);
    this.start();
    return true;
  }
}
