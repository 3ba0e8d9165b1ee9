/*
 * Constants copied by hand from bpf/*.h, in one place so that each has exactly one TypeScript
 * copy. Every one of them is replaced by the contract generated from the object's BTF.
 */

/** Overflow and failure counters, by index of the `counters` map (enum counter_index). */
// BPF mirror: replaced by the generated contract
export const COUNTER_NAMES = [
  'backends_full',
  'queries_full',
  'status_unreadable',
  'histograms_full',
  'mem_stalls_full',
  'io_inflight_full',
  'memio_untracked',
  'io_completions_missed',
  'lock_waits_full',
  'lwlock_waits_full',
] as const;
export type CounterName = (typeof COUNTER_NAMES)[number];

/** What a histogram measures (enum hist_kind), by its name in bpf_stats.query_histograms. */
// BPF mirror: replaced by the generated contract
export const HIST_KIND_NAMES = ['query_latency', 'runq', 'io'] as const;
export type HistKindName = (typeof HIST_KIND_NAMES)[number];

/** Bits of struct backend_record.flags. */
// BPF mirror: replaced by the generated contract
export const BACKEND_IDENTITY_KNOWN = 0x1n;
// BPF mirror: replaced by the generated contract
export const BACKEND_EXCLUDED = 0x2n;

/** Bits of the `hist_switches` global that switch work on inside on_sched_switch. */
// BPF mirror: replaced by the generated contract
export const HIST_SWITCH = { latency: 0x1, runq: 0x2 } as const;

/** The largest span of PgBackendStatus BPF reads in one go (STATUS_SPAN_MAX). */
// BPF mirror: replaced by the generated contract
export const STATUS_SPAN_MAX = 256;

/** lwlock_wait_key.mode when the probe could not tell the mode (semaphore sleeps without USDT). */
// BPF mirror: replaced by the generated contract
export const LWLOCK_MODE_UNKNOWN = 0xff;

/** lwlock_wait_key.tranche_id when the probe could not tell the tranche. */
// BPF mirror: replaced by the generated contract
export const LWLOCK_TRANCHE_UNKNOWN = 0xffffffff;

/** Maps of the collector object that user space reads or writes, by their name in the object. */
// BPF mirror: replaced by the generated contract
export const MAPS = {
  backends: 'backends',
  queries: 'queries',
  histograms: 'histograms',
  counters: 'counters',
  excludedPids: 'excluded_pids',
  lockWaits: 'lock_waits',
  lwlockWaits: 'lwlock_waits',
  memStalls: 'mem_stalls',
  ioInflight: 'io_inflight',
  lockWaitStarts: 'lock_wait_starts',
  lwlockWaitStarts: 'lwlock_wait_starts',
  bss: '.bss',
} as const;
