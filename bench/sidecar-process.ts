import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cliPath } from '../src/package-root.js';

/** The CLI as the package installs it (the bundle scripts/build.sh makes). */
const CLI = cliPath();
// The CLI logs "<ISO time> INFO  <message>" off a terminal, "pg-bpf-stats: <message>" on one.
const ATTACHED_LINE = /^(?:pg-bpf-stats: |\S+Z INFO\s+)attached probe sets: /m;
const ATTACHED_LINE_WHOLE = /^(?:pg-bpf-stats: |\S+Z INFO\s+)attached probe sets: .*$/m;
/** Logged once start-up is done (the schema checked, the first flush written): the collector is running. */
const READY_LINE = /^(?:pg-bpf-stats: |\S+Z INFO\s+)collecting every /m;
/** The node flags the CLI's first line gives its bin (`#!/usr/bin/env -S node --flag ...`): the bench runs it as installed. */
export function binNodeFlags(file = CLI): string[] {
  const first = readFileSync(file, 'utf8').split('\n', 1)[0] ?? '';
  const flags = /^#!\S*env -S node((?:\s+--\S+)*)\s*$/.exec(first)?.[1] ?? '';
  return flags.split(/\s+/).filter(Boolean);
}
/** /proc/<pid>/stat counts CPU time in clock ticks; USER_HZ is 100 on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

export interface SidecarProcessOptions {
  dsn: string;
  /** Value for --probes; undefined attaches the default sets only. */
  probes: string | undefined;
  /** Value for --interval (default 1s). */
  interval?: string;
  attachTimeoutMs?: number;
  /** More arguments for `run` (e.g. --row-retention 60s). */
  args?: string[];
  /** Its niceness from the start (`nice -n`, as systemd's Nice= sets it); absent: the bench's own. */
  nice?: number;
  /** Another build's CLI (an A/B against an older commit's tree); absent: this package's. */
  cli?: string;
  /** More environment (PGPASSWORD), over this process's. */
  env?: NodeJS.ProcessEnv;
}

/**
 * `pg-bpf-stats run` as a child process, as an operator would run it. Lives in its own process
 * group so a Ctrl-C in the terminal reaches only the benchmark, which then stops it in order.
 */
export class SidecarProcess {
  /** Children not yet reaped, for cleanup on errors and signals. */
  static readonly live = new Set<SidecarProcess>();

  private stderr = '';
  private readonly exited: Promise<number | null>;

  private constructor(
    private readonly child: ChildProcess,
    readonly pid: number,
  ) {
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
    SidecarProcess.live.add(this);
    void this.exited.then(() => SidecarProcess.live.delete(this));
  }

  /**
   * Spawns the CLI and resolves once it is running (its "collecting every" line), with the time
   * from the spawn to its "attached probe sets" line (attachMs) and to that line (readyMs).
   */
  static async start(options: SidecarProcessOptions): Promise<{ sidecar: SidecarProcess; attachMs: number; readyMs: number }> {
    const cli = options.cli ?? CLI;
    const args = [...binNodeFlags(cli), cli, 'run', '--dsn', options.dsn, '--interval', options.interval ?? '1s'];
    if (options.probes) args.push('--probes', options.probes);
    args.push(...(options.args ?? []));
    const spawnedAt = performance.now();
    const [command, commandArgs] =
      options.nice === undefined ? [process.execPath, args] : ['nice', ['-n', String(options.nice), process.execPath, ...args]];
    const child = spawn(command, commandArgs, {
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
      env: { ...process.env, ...options.env },
    });
    if (child.pid === undefined) throw new Error('could not spawn the sidecar');
    const sidecar = new SidecarProcess(child, child.pid);
    let attachMs: number;
    try {
      attachMs = (await sidecar.waitForLine(ATTACHED_LINE, 'attaching', options.attachTimeoutMs ?? 60_000)) - spawnedAt;
      await sidecar.waitForLine(READY_LINE, 'starting', options.attachTimeoutMs ?? 60_000);
    } catch (error) {
      await sidecar.stop();
      throw error;
    }
    return { sidecar, attachMs, readyMs: performance.now() - spawnedAt };
  }

  /** Its "attached probe sets" line (null before it attached). */
  attachedLine(): string | null {
    return ATTACHED_LINE_WHOLE.exec(this.stderr)?.[0] ?? null;
  }

  /** Resolves with performance.now() when a line matching `line` has been logged. */
  private waitForLine(line: RegExp, doing: string, timeoutMs: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (line.test(this.stderr)) done(null);
      };
      const timer = setTimeout(() => done(new Error(`sidecar still ${doing} after ${timeoutMs} ms:\n${this.log()}`)), timeoutMs);
      const onExit = () => done(new Error(`sidecar exited (${this.exitDescription()}) while ${doing}:\n${this.log()}`));
      const done = (error: Error | null) => {
        clearTimeout(timer);
        this.child.stderr!.off('data', check);
        this.child.off('exit', onExit);
        if (error) reject(error);
        else resolve(performance.now());
      };
      this.child.stderr!.on('data', check);
      this.child.once('exit', onExit);
      check();
    });
  }

  /** Resolves with the exit code (null: ended by a signal) once the process has exited. */
  whenExited(): Promise<number | null> {
    return this.exited;
  }

  /** Resident set size now (VmRSS), in MB. */
  rssMb(): number {
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'))?.[1];
    return Number(kb ?? 0) / 1024;
  }

  /**
   * Resident memory now, in MB: all of it (VmRSS), the private part (RssAnon: the V8 heap, malloc)
   * and the file-backed part (RssFile: mostly the node binary's code, shared with every node process).
   */
  memoryMb(): { rss: number; anon: number; file: number } {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) / 1024;
    return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile') };
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** "code N" or "signal S" once exited. */
  exitDescription(): string {
    return this.child.signalCode ? `signal ${this.child.signalCode}` : `code ${this.child.exitCode}`;
  }

  /** Everything the sidecar logged so far. */
  log(): string {
    return this.stderr.trimEnd();
  }

  /** User plus system CPU time consumed so far, all threads (fields 14 and 15 of /proc/<pid>/stat). */
  cpuSeconds(): number {
    const stat = readFileSync(`/proc/${this.pid}/stat`, 'utf8');
    // Field 2 (comm) is parenthesised and may contain spaces; field 3 starts after its ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(fields[14 - 3]);
    const stime = Number(fields[15 - 3]);
    return (utime + stime) / CLOCK_TICKS_PER_SECOND;
  }

  /**
   * Ids of the BPF programs this process holds open (prog_id in /proc/<pid>/fdinfo), so that
   * another collector running on the host at the same time is never counted as this one.
   */
  programIds(): Set<number> {
    const ids = new Set<number>();
    for (const fd of readdirSync(`/proc/${this.pid}/fdinfo`)) {
      try {
        const id = /^prog_id:\s+(\d+)/m.exec(readFileSync(`/proc/${this.pid}/fdinfo/${fd}`, 'utf8'))?.[1];
        if (id !== undefined) ids.add(Number(id));
      } catch {
        // The fd was closed between the listing and the read.
      }
    }
    return ids;
  }

  /** Peak resident set size so far (VmHWM), in MB. */
  peakRssMb(): number {
    const status = readFileSync(`/proc/${this.pid}/status`, 'utf8');
    const kb = /^VmHWM:\s+(\d+) kB/m.exec(status)?.[1];
    if (kb === undefined) throw new Error(`no VmHWM in /proc/${this.pid}/status`);
    return Number(kb) / 1024;
  }

  /**
   * Runs `round` again and again for `seconds` (each round at least `minRoundMs`, sleeping out the
   * rest), as the load the collector sees: how many rounds ran, and the collector's CPU meanwhile
   * in ms per second. Throws if the collector exited meanwhile.
   */
  async cpuUnderLoad(seconds: number, round: () => Promise<unknown>, minRoundMs = 0): Promise<{ rounds: number; cpuMsPerS: number }> {
    const cpuBefore = this.cpuSeconds();
    const started = Date.now();
    let rounds = 0;
    while (Date.now() < started + seconds * 1000) {
      const tick = Date.now();
      await round();
      rounds++;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, minRoundMs - (Date.now() - tick))));
    }
    if (!this.running) throw new Error(`sidecar exited (${this.exitDescription()}):\n${this.log()}`);
    return { rounds, cpuMsPerS: ((this.cpuSeconds() - cpuBefore) * 1000) / ((Date.now() - started) / 1000) };
  }

  /** Pauses (false: SIGUSR1) or resumes (true: SIGUSR2) collection, as an operator would. */
  setCollecting(on: boolean): void {
    if (!this.running) throw new Error(`sidecar exited (${this.exitDescription()}):\n${this.log()}`);
    this.child.kill(on ? 'SIGUSR2' : 'SIGUSR1');
  }

  /** SIGTERM, then SIGKILL if it has not exited within `graceMs`; resolves with the exit code. */
  async stop(graceMs = 30_000): Promise<number | null> {
    if (this.running) this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Last resort when the benchmark itself is exiting: no waiting possible. */
  killNow(): void {
    if (this.running) this.child.kill('SIGKILL');
  }
}
