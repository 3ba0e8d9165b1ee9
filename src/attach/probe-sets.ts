import { UserError } from '../errors.js';
import type { ProbeSetName } from '../collect/metric-columns.js';
import type { PostmasterTarget } from '../target/postmaster-target.js';
import { LOCK_PROBE_SETS } from './lock-probe-sets.js';
import { KernelFeatures } from './kernel-features.js';
import { CPU_TICK_EVENT, LLC_EVENTS, perfEventsUnsupportedReason, type PerfEventSpec } from './perf-events.js';

/** One attachment a probe set makes: a program of the collector object and where it goes. */
export type ProbeAttachment =
  | { program: string; kind: 'auto' }
  /** The end of each top-level statement, as discovery located it for this binary. */
  | { program: string; kind: 'statement-end' }
  /** Probes chosen per target: USDT where the build has it, exported functions otherwise. */
  | { kind: 'target'; probes(target: PostmasterTarget): TargetProbe[] }
  /** Work switched on inside `program` (already attached by another set): a bit of hist_switches. */
  | { program: string; kind: 'switch'; bit: number }
  /** A sampled perf event opened on every online CPU (user space chooses the event). */
  | { program: string; kind: 'perf-event'; event: PerfEventSpec };

/** A USDT probe (postgresql provider) or a uprobe/uretprobe on an exported function. */
export type TargetProbe =
  | { program: string; usdt: string }
  | { program: string; symbol: string; retprobe: boolean }
  /** A uprobe at one instruction (file offset), e.g. one call site inside a function. */
  | { program: string; fileOffset: bigint };

export interface ProbeSet {
  name: ProbeSetName;
  description: string;
  /** Always attached by `run`; the others are opt-in. */
  default: boolean;
  /**
   * A default set that `run` attaches only where it is supported (logging why not) instead of
   * refusing to start; `check` shows it as optional.
   */
  whereSupported?: boolean;
  /** Why this set cannot run against `target`, or null when it can. */
  unsupportedReason(target: PostmasterTarget): string | null;
  attachments: ProbeAttachment[];
  /** Measured cost, for `check` and the docs (bench/overhead.ts). */
  cost: string;
}

const MEMORY_PROGRAMS: Record<string, string> = {
  mm_vmscan_direct_reclaim_begin: 'on_dreclaim_beg',
  mm_vmscan_direct_reclaim_end: 'on_dreclaim_end',
  mm_vmscan_memcg_reclaim_begin: 'on_mreclaim_beg',
  mm_vmscan_memcg_reclaim_end: 'on_mreclaim_end',
  mm_compaction_begin: 'on_compact_beg',
  mm_compaction_end: 'on_compact_end',
};
const MEMORY_TRACEPOINTS = Object.keys(MEMORY_PROGRAMS);
const IO_PROGRAMS: Record<string, string[]> = {
  block_io_start: ['on_blk_start'],
  block_rq_merge: ['on_blk_merge'],
  block_rq_complete: ['on_blk_done'],
  balance_dirty_pages: ['on_dirty_pause'],
};
const IO_TRACEPOINTS = Object.keys(IO_PROGRAMS);

/** Why a set needing `tracepoints` cannot run on this kernel, or null. */
function missing(tracepoints: readonly string[]): string | null {
  const name = KernelFeatures.host().missingTracepoint(tracepoints);
  if (name === null) return null;
  const since = name.startsWith('block_io_') ? ' (added in Linux 6.5)' : '';
  return `this kernel has no tracepoint ${name}${since}`;
}

export const PROBE_SETS: Record<ProbeSetName, ProbeSet> = {
  cpu: {
    name: 'cpu',
    description: 'on-CPU, run-queue and off-CPU wait time, context switches, migrations, page faults',
    default: true,
    unsupportedReason: () => null,
    attachments: [
      { program: 'on_sched_switch', kind: 'auto' },
      { program: 'on_cpu_tick', kind: 'perf-event', event: CPU_TICK_EVENT },
    ],
    cost: 'one tp_btf sched_switch event per backend context switch, and a CPU-clock sample every 100 ms per CPU',
  },
  query: {
    name: 'query',
    description: 'exact call counts: one probe where each top-level statement ends (PortalRun)',
    default: false,
    unsupportedReason: (target) => (target.statementEnd ? null : `${target.binaryPath} exports no PortalRun`),
    attachments: [{ program: 'on_query_done', kind: 'statement-end' }],
    cost: 'one uprobe trap per statement (~4 us; ~5 us as a uretprobe on builds without USDT)',
  },
  ...LOCK_PROBE_SETS,
  memory: {
    name: 'memory',
    description: 'direct and memcg reclaim stalls and pages reclaimed, direct compaction stalls',
    default: true,
    whereSupported: true,
    unsupportedReason: () => missing(MEMORY_TRACEPOINTS),
    attachments: MEMORY_TRACEPOINTS.map((tp) => ({ program: MEMORY_PROGRAMS[tp]!, kind: 'auto' as const })),
    cost: 'tp_btf events only when a task reclaims or compacts (none under a cached load)',
  },
  io: {
    name: 'io',
    description: 'block IO requests, bytes and latency of the requests a backend created, writeback throttling pauses',
    default: true,
    whereSupported: true,
    unsupportedReason: () =>
      missing(IO_TRACEPOINTS) ??
      (KernelFeatures.host().hz() === null ? 'the kernel tick rate (CONFIG_HZ) is unknown: no kernel config, no /proc/timer_list' : null),
    attachments: IO_TRACEPOINTS.flatMap((tp) => IO_PROGRAMS[tp]!.map((program) => ({ program, kind: 'auto' as const }))),
    cost: 'two tp_btf events per block request on the host (start, completion), one per request merge and per writeback throttling round',
  },
  latency: {
    name: 'latency',
    description: 'statement latency histograms (query_start .. state_change, read when a backend goes idle)',
    // Opt-in: +0.1-0.2 us of BPF time per pgbench -S transaction (bench/histogram-cost.ts), a
    // third more than the cpu set's own, which is over its overhead budget already.
    default: false,
    unsupportedReason: () => null,
    attachments: [{ program: 'on_sched_switch', kind: 'switch', bit: 0x1 }],
    cost: 'inside the cpu set: a 24-byte user read per ClientRead sleep or preemption, a histogram update per statement (~0.1-0.2 us of BPF time per pgbench -S transaction)',
  },
  sched: {
    name: 'sched',
    description: 'run-queue latency histograms per query (each slice\'s wait for a CPU)',
    default: false,
    unsupportedReason: () => null,
    attachments: [{ program: 'on_sched_switch', kind: 'switch', bit: 0x2 }],
    cost: 'inside the cpu set: a histogram update per context switch that followed a run-queue wait (~0-0.17 us of BPF time per pgbench -S transaction)',
  },
  llc: {
    name: 'llc',
    description: 'LLC references and misses per backend and query (sampled hardware cache events)',
    default: false,
    unsupportedReason: () => perfEventsUnsupportedReason(Object.values(LLC_EVENTS)),
    attachments: [
      { program: 'on_llc_reference', kind: 'perf-event', event: LLC_EVENTS.on_llc_reference },
      { program: 'on_llc_miss', kind: 'perf-event', event: LLC_EVENTS.on_llc_miss },
    ],
    cost: 'one perf_event program run per sample (every 100000 references / 10000 misses per CPU)',
  },
};

/**
 * Validates probe set names given by a user (CLI flag or SQL request).
 *
 * @example
 * parseProbeSets('cpu,query'); // ['cpu', 'query']
 */
export function parseProbeSets(input: string | readonly string[]): ProbeSetName[] {
  const names = (typeof input === 'string' ? input.split(',') : [...input]).map((s) => s.trim()).filter(Boolean);
  const unknown = names.filter((n) => !(n in PROBE_SETS));
  if (unknown.length) {
    throw new UserError(`unknown probe set ${unknown.join(', ')}: known sets are ${Object.keys(PROBE_SETS).join(', ')}`);
  }
  return [...new Set(names)] as ProbeSetName[];
}
