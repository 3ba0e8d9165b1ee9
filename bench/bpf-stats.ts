import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The collector's programs, by the name the kernel keeps (at most 15 characters). */
export const COLLECTOR_PROGRAMS = [
  'on_sched_switch',
  'on_query_done',
  // memory and io sets (bpf/memory-io.bpf.h)
  'on_dreclaim_beg',
  'on_dreclaim_end',
  'on_mreclaim_beg',
  'on_mreclaim_end',
  'on_compact_beg',
  'on_compact_end',
  'on_dirty_pause',
  'on_blk_start',
  'on_blk_merge',
  'on_blk_done',
] as const;

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
  const names: readonly string[] = COLLECTOR_PROGRAMS;
  return programs.filter((p) => names.includes(p.name)).length;
}

/**
 * The collector's programs among `programs`: the right name, not loaded before the sidecar was
 * spawned (`preexisting`), and held open by the sidecar (`owned`).
 */
export function collectorPrograms(programs: ProgramStats[], preexisting: ReadonlySet<number>, owned: ReadonlySet<number>): ProgramStats[] {
  const names: readonly string[] = COLLECTOR_PROGRAMS;
  return programs.filter((p) => names.includes(p.name) && !preexisting.has(p.id) && owned.has(p.id));
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
