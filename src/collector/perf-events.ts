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

/** perf_event_attr.type values (linux/perf_event.h). */
export const PERF_TYPE_HARDWARE = 0;
export const PERF_TYPE_SOFTWARE = 1;
const EPERM = 1;
const EACCES = 13;

/**
 * Why these perf events cannot be opened here, or null when they can. A missing hardware
 * PMU (VMs without PMU passthrough) is the common answer: perf_event_open fails with ENOENT.
 *
 * @example
 * perfEventsUnsupportedReason([cacheMisses]); // 'no hardware PMU (perf_event_open cache-references: errno 2)'
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
