import type { ProgramDelta } from './bpf-stats.js';

/** One pgbench run without the sidecar. */
export interface OffRun {
  pair: number;
  mode: 'off';
  tps: number;
  transactions: number;
  /** Collector programs someone else had loaded when the run started (they slow both modes). */
  otherCollectorPrograms: number;
}

/** One pgbench run with the sidecar attached, and what the sidecar and its programs cost. */
export interface OnRun {
  pair: number;
  mode: 'on';
  tps: number;
  transactions: number;
  otherCollectorPrograms: number;
  /** Spawn to the "attached probe sets" log line. */
  attachMs: number;
  /** Sidecar CPU from spawn to just before SIGTERM. */
  sidecarCpuSeconds: number;
  /** Sidecar CPU while pgbench ran (the steady-state part of the above). */
  sidecarCpuSecondsDuringRun: number;
  peakRssMb: number;
  /** The collector's programs' run_time_ns and run_cnt increase while pgbench ran. */
  programs: ProgramDelta[];
}

export interface PairResult {
  pair: number;
  order: 'off,on' | 'on,off';
  off: OffRun;
  on: OnRun;
  ratio: number;
}

export interface ProgramSummary {
  name: string;
  type: string;
  nsPerEvent: number;
  eventsPerTransaction: number;
}

export interface Summary {
  tpsOffMedian: number;
  tpsOnMedian: number;
  ratioMedian: number;
  /** 95% bootstrap interval of the median ratio: how far the noise lets the headline move. */
  ratioMedianLow: number;
  ratioMedianHigh: number;
  ratioMin: number;
  ratioMax: number;
  /** Programs that ran; a program loaded but not attached (an opt-in set not asked for) is in `idlePrograms`. */
  programs: ProgramSummary[];
  idlePrograms: string[];
  eventsPerTransaction: number;
  bpfUsPerTransaction: number;
  sidecarUsPerTransaction: number;
  sidecarStartupCpuMsMedian: number;
  /** CPU time available per transaction at the off-run rate: cores × 1e6 µs / TPS off. */
  budgetUsPerTransaction: number;
  costPercentOfBudget: number;
  attachMsMedian: number;
  peakRssMbMax: number;
}

export interface BenchSettings {
  label: string;
  probes: string | undefined;
  /** Pairs of runs (restart) or on-blocks (blocks). */
  pairs: number;
  /** Length of each run, and of the cost run. */
  seconds: number;
  /** blocks: one long run, collector paused and resumed inside it; restart: a fresh sidecar per on-run. */
  method?: 'blocks' | 'restart';
  blockSeconds?: number;
  clients: number;
  scale: number;
  cores: number;
}

/**
 * Percentile bootstrap of the median: resample the pairs with replacement many times and take
 * the 2.5th and 97.5th percentiles of the resampled medians. A fixed-seed generator keeps the
 * report reproducible for the same pairs.
 */
export function bootstrapMedianInterval(values: number[], rounds = 4000): { ratioMedianLow: number; ratioMedianHigh: number } {
  let seed = 0x9e3779b9;
  const random = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x1_0000_0000;
  };
  const medians = Array.from({ length: rounds }, () => median(values.map(() => values[Math.floor(random() * values.length)]!)));
  medians.sort((a, b) => a - b);
  return { ratioMedianLow: medians[Math.floor(rounds * 0.025)]!, ratioMedianHigh: medians[Math.floor(rounds * 0.975)]! };
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

/** Per-program figures pooled over all on-runs (total time / total events, total events / total transactions). */
function summarizePrograms(onRuns: OnRun[]): { programs: ProgramSummary[]; idlePrograms: string[] } {
  const transactions = sum(onRuns.map((r) => r.transactions));
  const names = [...new Set(onRuns.flatMap((r) => r.programs.map((p) => p.name)))];
  const programs: ProgramSummary[] = [];
  const idlePrograms: string[] = [];
  for (const name of names) {
    const deltas = onRuns.flatMap((r) => r.programs.filter((p) => p.name === name));
    const events = sum(deltas.map((d) => d.runCnt));
    const ns = sum(deltas.map((d) => d.runTimeNs));
    if (events === 0) idlePrograms.push(name);
    else programs.push({ name, type: deltas[0]!.type, nsPerEvent: ns / events, eventsPerTransaction: events / transactions });
  }
  return { programs, idlePrograms };
}

/** The throughput half of a summary, from whichever method paired on with off. */
export interface Throughput {
  /** One on/off ratio per pair (restart method) or per on-block (alternating blocks). */
  ratios: number[];
  tpsOff: number[];
  tpsOn: number[];
}

/**
 * The headline is the median of per-pair on/off ratios: each pair's two runs are adjacent in
 * time, so the ratio cancels most of the machine's drift, and the median drops the odd pair
 * that a neighbour disturbed.
 */
export function pairsThroughput(pairs: PairResult[]): Throughput {
  return { ratios: pairs.map((p) => p.ratio), tpsOff: pairs.map((p) => p.off.tps), tpsOn: pairs.map((p) => p.on.tps) };
}

/** A sidecar that ran the throughput part as one long-lived process (alternating blocks). */
export interface LongLivedSidecar {
  attachMs: number;
  peakRssMb: number;
  /** Its CPU while collecting (resume to pause), and the transactions pgbench ran meanwhile. */
  cpuSecondsCollecting: number;
  transactionsCollecting: number;
}

/**
 * Throughput from the pairs or blocks (run without bpf_stats timing); exact BPF cost from
 * `costRun` (run with it); sidecar CPU, attach time and RSS from every sidecar started.
 */
export function summarize(
  throughput: Throughput,
  costRun: OnRun,
  cores: number,
  onRuns: OnRun[] = [],
  longLived?: LongLivedSidecar,
): Summary {
  const runs = [...onRuns, costRun];
  const { ratios } = throughput;
  const bpfNs = sum(costRun.programs.map((p) => p.runTimeNs));
  const events = sum(costRun.programs.map((p) => p.runCnt));
  // A long-lived sidecar's steady state, when there was one; else every sidecar's run.
  const sidecarSeconds = longLived ? longLived.cpuSecondsCollecting : sum(runs.map((r) => r.sidecarCpuSecondsDuringRun));
  const sidecarTransactions = longLived ? longLived.transactionsCollecting : sum(runs.map((r) => r.transactions));
  const tpsOffMedian = median(throughput.tpsOff);
  const bpfUsPerTransaction = bpfNs / 1000 / costRun.transactions;
  const sidecarUsPerTransaction = (sidecarSeconds * 1e6) / sidecarTransactions;
  const budgetUsPerTransaction = (cores * 1e6) / tpsOffMedian;
  return {
    tpsOffMedian,
    tpsOnMedian: median(throughput.tpsOn),
    ratioMedian: median(ratios),
    ...bootstrapMedianInterval(ratios),
    ratioMin: Math.min(...ratios),
    ratioMax: Math.max(...ratios),
    ...summarizePrograms([costRun]),
    eventsPerTransaction: events / costRun.transactions,
    bpfUsPerTransaction,
    sidecarUsPerTransaction,
    sidecarStartupCpuMsMedian: median(runs.map((r) => (r.sidecarCpuSeconds - r.sidecarCpuSecondsDuringRun) * 1000)),
    budgetUsPerTransaction,
    costPercentOfBudget: ((bpfUsPerTransaction + sidecarUsPerTransaction) / budgetUsPerTransaction) * 100,
    attachMsMedian: median([...runs.map((r) => r.attachMs), ...(longLived ? [longLived.attachMs] : [])]),
    peakRssMbMax: Math.max(...runs.map((r) => r.peakRssMb), longLived?.peakRssMb ?? 0),
  };
}

const fixed = (value: number, digits: number) => value.toFixed(digits);

/** The target applies to the default probe sets only. */
export const DEFAULT_SET_TARGET_RATIO = 0.97;

export function pairLine(p: PairResult): string {
  const others = Math.max(p.off.otherCollectorPrograms, p.on.otherCollectorPrograms);
  const warning = others ? ` [warning: ${others} BPF programs of another collector were loaded]` : '';
  return `pair ${p.pair} (${p.order}): off ${fixed(p.off.tps, 0)} tps, on ${fixed(p.on.tps, 0)} tps, on/off ${fixed(p.ratio, 3)}, attached in ${fixed(p.on.attachMs, 0)} ms${warning}`;
}

/** The human-readable summary block. */
export function humanReport(s: Summary, settings: BenchSettings): string[] {
  const target = settings.probes
    ? '(no target for opt-in sets)'
    : `target ≥ ${DEFAULT_SET_TARGET_RATIO}: ${s.ratioMedian >= DEFAULT_SET_TARGET_RATIO ? 'met' : 'NOT met'}`;
  const row = (label: string, value: string) => `  ${label.padEnd(26)} ${value}`;
  return [
    `summary (probe sets: ${settings.label}):`,
    row('TPS off (median)', fixed(s.tpsOffMedian, 0)),
    row('TPS on (median)', fixed(s.tpsOnMedian, 0)),
    row('on/off ratio (median)', `${fixed(s.ratioMedian, 3)}  [min ${fixed(s.ratioMin, 3)}, max ${fixed(s.ratioMax, 3)}]  ${target}`),
    row(
      'median, 95% interval',
      `${fixed(s.ratioMedianLow, 3)}–${fixed(s.ratioMedianHigh, 3)} (bootstrap over ${settings.method === 'blocks' ? 'on-blocks' : 'pairs'})`,
    ),
    ...s.programs.map((p) => row(`BPF ${p.name}`, `${fixed(p.nsPerEvent, 0)} ns/event, ${fixed(p.eventsPerTransaction, 2)} events/txn`)),
    ...(s.idlePrograms.length ? [row('loaded, never ran', s.idlePrograms.join(', '))] : []),
    row('BPF total', `${fixed(s.eventsPerTransaction, 2)} events/txn, ${fixed(s.bpfUsPerTransaction, 2)} µs/txn`),
    row(
      'sidecar CPU',
      `${fixed(s.sidecarUsPerTransaction, 2)} µs/txn while ${settings.method === 'blocks' ? 'collecting (long-lived sidecar)' : 'pgbench ran'}; startup ${fixed(s.sidecarStartupCpuMsMedian, 0)} ms CPU (median)`,
    ),
    row('CPU budget per txn', `${fixed(s.budgetUsPerTransaction, 1)} µs (${settings.cores} cores × 1e6 µs / TPS off)`),
    row(
      'BPF + sidecar',
      `${fixed(s.costPercentOfBudget, 2)} % of the budget (predicts on/off ≈ ${fixed(1 / (1 + s.costPercentOfBudget / 100), 3)} at saturation)`,
    ),
    row('time to attached (median)', `${fixed(s.attachMsMedian, 0)} ms`),
    row('peak RSS (max)', `${fixed(s.peakRssMbMax, 1)} MB`),
    ...uprobeNote(s.programs),
  ];
}

/*
 * bpf_stats times the program only. For a uprobe (USDT) the trap into the kernel and back
 * costs more than the program, so the cost above understates such sets; the TPS ratio does not.
 */
function uprobeNote(programs: ProgramSummary[]): string[] {
  const uprobes = programs.filter((p) => p.type === 'kprobe').map((p) => p.name);
  if (!uprobes.length) return [];
  return [
    `  note: ${uprobes.join(', ')} ${uprobes.length > 1 ? 'are uprobes' : 'is a uprobe'}: run_time_ns excludes the trap into the kernel`,
    '        and back, which costs more than the program; BPF µs/txn and the budget % understate it, the TPS ratio does not.',
  ];
}

/** "60 on-blocks × 6 s between off-blocks" or "30 pairs × 10 s". */
export function runsDescription(settings: BenchSettings): string {
  return settings.method === 'blocks'
    ? `${settings.pairs} on-blocks × ${settings.blockSeconds} s between off-blocks`
    : `${settings.pairs} pairs × ${settings.seconds} s`;
}

/** A markdown table (header, separator, one row) to paste into the docs. */
export function markdownRow(s: Summary, settings: BenchSettings): string[] {
  const perProgram = (f: (p: ProgramSummary) => string) => s.programs.map((p) => `${p.name} ${f(p)}`).join('<br>');
  const cells = [
    settings.label,
    `${runsDescription(settings)}, -c ${settings.clients}, -s ${settings.scale}`,
    fixed(s.tpsOffMedian, 0),
    fixed(s.tpsOnMedian, 0),
    fixed(s.ratioMedian, 3),
    `${fixed(s.ratioMedianLow, 3)}–${fixed(s.ratioMedianHigh, 3)}`,
    `${fixed(s.ratioMin, 3)}–${fixed(s.ratioMax, 3)}`,
    perProgram((p) => fixed(p.nsPerEvent, 0)),
    perProgram((p) => fixed(p.eventsPerTransaction, 2)),
    fixed(s.bpfUsPerTransaction, 2),
    fixed(s.sidecarUsPerTransaction, 2),
    fixed(s.costPercentOfBudget, 2),
    fixed(s.attachMsMedian, 0),
    fixed(s.peakRssMbMax, 1),
  ];
  const header = [
    'probes',
    'runs',
    'TPS off',
    'TPS on',
    'on/off (median)',
    'median 95% interval',
    'on/off min–max',
    'ns/event',
    'events/txn',
    'BPF µs/txn',
    'sidecar µs/txn',
    '% of CPU budget',
    'attach ms',
    'peak RSS MB',
  ];
  const line = (values: string[]) => `| ${values.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), line(cells)];
}
