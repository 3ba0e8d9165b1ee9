import { HIST_SWITCH } from '../../bpf/mirror.js';
import { PERF_TYPE_SOFTWARE, type PerfEventSpec } from '../../collector/perf-events.js';
import { defineFamily } from '../family.js';

const PERF_COUNT_SW_CPU_CLOCK = 0;

/**
 * The cpu set's periodic sample: CPU-clock every 100 ms (the period is in ns) on each CPU, so a
 * backend that never leaves its CPU is still accounted while it runs. A software event: every
 * kernel with perf events has it, PMU or not.
 */
export const CPU_TICK_EVENT: PerfEventSpec = { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_CPU_CLOCK, samplePeriod: 100_000_000, label: 'cpu-clock' };

/** The scheduler's view of each backend: on-CPU and waiting time, switches, migrations, faults. */
export const cpuFamily = defineFamily({
  name: 'cpu',
  probeSets: {
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
    sched: {
      name: 'sched',
      description: "run-queue latency histograms per query (each slice's wait for a CPU)",
      default: false,
      unsupportedReason: () => null,
      attachments: [{ program: 'on_sched_switch', kind: 'switch', bit: HIST_SWITCH.runq }],
      cost: 'inside the cpu set: a histogram update per context switch that followed a run-queue wait (~0-0.17 us of BPF time per pgbench -S transaction)',
    },
  },
  columns: [
    { column: 'total_time_ms', field: 'total_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'on_cpu_ms', field: 'on_cpu_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'runq_wait_ms', field: 'runq_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'io_wait_ms', field: 'io_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'lock_wait_ms', field: 'lock_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'lwlock_wait_ms', field: 'lwlock_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'other_wait_ms', field: 'other_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
    { column: 'minflt', field: 'minflt', unit: 'count', measuredBy: ['cpu'] },
    { column: 'majflt', field: 'majflt', unit: 'count', measuredBy: ['cpu'] },
    { column: 'cpu_migrations', field: 'cpu_migrations', unit: 'count', measuredBy: ['cpu'] },
    { column: 'nvcsw', field: 'nvcsw', unit: 'count', measuredBy: ['cpu'] },
    { column: 'nivcsw', field: 'nivcsw', unit: 'count', measuredBy: ['cpu'] },
  ],
});
