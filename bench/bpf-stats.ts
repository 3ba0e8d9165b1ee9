import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { collectorObjectPath } from '../src/collector/collector-object.js';
import { ElfFile } from '../src/postmaster/elf-file.js';

const run = promisify(execFile);

const STT_FUNC = 2;
/** The kernel keeps at most 15 characters of a program's name. */
const KERNEL_NAME_LENGTH = 15;

/**
 * The collector's programs, by the name the kernel keeps: every function symbol of the built
 * object, so a program a probe set adds is counted without being listed here.
 */
export const COLLECTOR_PROGRAMS: readonly string[] = [...ElfFile.read(collectorObjectPath()).symbols().values()]
  .filter((s) => s.type === STT_FUNC)
  .map((s) => s.name.slice(0, KERNEL_NAME_LENGTH));

/** One loaded BPF program and its kernel run statistics (zero while bpf_stats_enabled is 0). */
export interface ProgramStats {
  id: number;
  name: string;
  /** bpftool's program type: "tracing" for tp_btf, "kprobe" for uprobes and USDT probes. */
  type: string;
  runTimeNs: number;
  runCnt: number;
}

/** What a program did between two snapshots: the same fields, as increases. */
export type ProgramDelta = ProgramStats;

interface BpftoolProgram {
  id: number;
  type?: string;
  name?: string;
  run_time_ns?: number;
  run_cnt?: number;
}

/** All loaded BPF programs (bpftool -j prog show; it omits the counters while they are zero). */
export async function listPrograms(): Promise<ProgramStats[]> {
  const { stdout } = await run('bpftool', ['-j', 'prog', 'show'], { maxBuffer: 64 * 1024 * 1024 });
  const programs = JSON.parse(stdout) as BpftoolProgram[];
  return programs.map((p) => ({ id: p.id, name: p.name ?? '', type: p.type ?? '', runTimeNs: p.run_time_ns ?? 0, runCnt: p.run_cnt ?? 0 }));
}

/** How many programs named like the collector's are loaded: another collector on this host, if any. */
export function countCollectorNamed(programs: ProgramStats[]): number {
  return programs.filter((p) => COLLECTOR_PROGRAMS.includes(p.name)).length;
}

/**
 * The collector's programs among `programs`: the right name, not loaded before the sidecar was
 * spawned (`preexisting`), and held open by the sidecar (`owned`).
 */
export function collectorPrograms(programs: ProgramStats[], preexisting: ReadonlySet<number>, owned: ReadonlySet<number>): ProgramStats[] {
  return programs.filter((p) => COLLECTOR_PROGRAMS.includes(p.name) && !preexisting.has(p.id) && owned.has(p.id));
}

/** Per-program counter increase from `before` to `after` (matched by id). */
export function programDeltas(before: ProgramStats[], after: ProgramStats[]): ProgramDelta[] {
  return after.map((a) => {
    const b = before.find((p) => p.id === a.id);
    return { id: a.id, name: a.name, type: a.type, runTimeNs: a.runTimeNs - (b?.runTimeNs ?? 0), runCnt: a.runCnt - (b?.runCnt ?? 0) };
  });
}

const STATS_SYSCTL = 'kernel.bpf_stats_enabled';

/** The current kernel.bpf_stats_enabled value ("0" or "1"). */
export function readStatsEnabled(): string {
  return readFileSync('/proc/sys/kernel/bpf_stats_enabled', 'utf8').trim();
}

/** Sets kernel.bpf_stats_enabled: with it on, the kernel times every program run. */
export async function setStatsEnabled(value: string): Promise<void> {
  await run('sysctl', ['-q', '-w', `${STATS_SYSCTL}=${value}`]);
}
