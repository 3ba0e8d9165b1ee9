import { readFileSync } from 'node:fs';
import { loadNative } from '../native/bpf-native.js';

/** One sampled perf event a program is attached to on every CPU (fields of perf_event_attr). */
export interface PerfEventSpec {
  /** PERF_TYPE_* (0 = HARDWARE, 1 = SOFTWARE, 3 = HW_CACHE). */
  type: number;
  config: number;
  /** The program runs every `samplePeriod` events and adds the period to its counter. */
  samplePeriod: number;
  /** For messages, e.g. 'cache-misses'. */
  label: string;
}

const PERF_TYPE_HARDWARE = 0;
const PERF_TYPE_SOFTWARE = 1;
const EPERM = 1;
const EACCES = 13;
const PERF_COUNT_SW_CPU_CLOCK = 0;

/**
 * The cpu set's periodic sample: CPU-clock every 100 ms (the period is in ns) on each CPU, so a
 * backend that never leaves its CPU is still accounted while it runs. A software event: every
 * kernel with perf events has it, PMU or not.
 */
export const CPU_TICK_EVENT: PerfEventSpec = { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_CPU_CLOCK, samplePeriod: 100_000_000, label: 'cpu-clock' };
const PERF_COUNT_HW_CACHE_REFERENCES = 2;
const PERF_COUNT_HW_CACHE_MISSES = 3;

/*
 * The generic cache events, which the kernel maps to the last-level cache on x86 and most
 * arm64 PMUs. Periods keep a busy backend at a few thousand samples per second; each sample
 * adds its period, so the sums stay unbiased estimates.
 */
export const LLC_EVENTS: Record<'on_llc_reference' | 'on_llc_miss', PerfEventSpec> = {
  on_llc_reference: { type: PERF_TYPE_HARDWARE, config: PERF_COUNT_HW_CACHE_REFERENCES, samplePeriod: 100_000, label: 'cache-references' },
  on_llc_miss: { type: PERF_TYPE_HARDWARE, config: PERF_COUNT_HW_CACHE_MISSES, samplePeriod: 10_000, label: 'cache-misses' },
};

/**
 * Why these perf events cannot be opened here, or null when they can. A missing hardware
 * PMU (VMs without PMU passthrough) is the common answer: perf_event_open fails with ENOENT.
 *
 * @example
 * perfEventsUnsupportedReason(Object.values(LLC_EVENTS)); // 'no hardware PMU (perf_event_open cache-references: errno 2)'
 */
export function perfEventsUnsupportedReason(specs: readonly PerfEventSpec[]): string | null {
  const native = loadNative();
  for (const spec of specs) {
    const probe = native.probePerfEvent(spec.type, spec.config);
    if (probe.ok) continue;
    const what = `perf_event_open ${spec.label}: errno ${probe.errno}`;
    // EPERM/EACCES: not allowed (not root, perf_event_paranoid), which says nothing about the PMU.
    if (probe.errno === EPERM || probe.errno === EACCES) return `not permitted (${what})`;
    return spec.type === PERF_TYPE_HARDWARE ? `no hardware PMU (${what})` : what;
  }
  return null;
}

/** The online CPUs (/sys/devices/system/cpu/online, e.g. "0-3,6"): one event is opened on each. */
export function onlineCpus(): number[] {
  const cpus: number[] = [];
  for (const range of readFileSync('/sys/devices/system/cpu/online', 'utf8').trim().split(',')) {
    const [from, to] = range.split('-').map(Number);
    for (let cpu = from!; cpu <= (to ?? from!); cpu++) cpus.push(cpu);
  }
  return cpus;
}
