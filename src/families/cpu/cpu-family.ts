import { HistSwitch } from '../../bpf/contract.js';
import { PERF_TYPE_SOFTWARE, type PerfEventSpec } from '../../collector/perf-events.js';
import { defineFamily } from '../family.js';

const PERF_COUNT_SW_CPU_CLOCK = 0;

/**
 * The cpu set's periodic sample: CPU-clock every 100 ms (the period is in ns) on each CPU, so a
 * backend that never leaves its CPU is still accounted while it runs. A software event: every
 * kernel with perf events has it, PMU or not.
 */
export const CPU_TICK_EVENT: PerfEventSpec = {
  type: PERF_TYPE_SOFTWARE,
  config: PERF_COUNT_SW_CPU_CLOCK,
  samplePeriod: 100_000_000,
  label: 'cpu-clock',
};

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
      attachments: [{ program: 'on_sched_switch', kind: 'switch', bit: HistSwitch.HIST_SWITCH_RUNQ }],
      cost: 'inside the cpu set: a histogram update per context switch that followed a run-queue wait (~0-0.17 us of BPF time per pgbench -S transaction)',
    },
  },
  columns: [
    {
      column: 'total_time_ms',
      field: 'total_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        "Milliseconds of wall time at work, from being woken for a statement (the client's message) until waiting for the client again; includes parsing, planning and protocol handling, so a little above pg_stat_statements.total_exec_time. = on_cpu_ms + runq_wait_ms + io_wait_ms + lock_wait_ms + lwlock_wait_ms + other_wait_ms. Time waiting for the client is in no column. Probe set `cpu` (always on).",
    },
    {
      column: 'on_cpu_ms',
      field: 'on_cpu_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        "Milliseconds on a CPU (the scheduler's se.sum_exec_runtime). Part of the partition of total_time_ms. Probe set `cpu` (always on).",
    },
    {
      column: 'runq_wait_ms',
      field: 'runq_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        'Milliseconds runnable but not running (sched_info.run_delay: run-queue latency, preemption, CPU throttling). Part of the partition of total_time_ms. Probe set `cpu` (always on).',
    },
    {
      column: 'io_wait_ms',
      field: 'io_wait_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        "Milliseconds asleep in IO (the kernel's iowait flag, or a Postgres IO wait event). Part of the partition of total_time_ms. Probe set `cpu` (always on).",
    },
    {
      column: 'lock_wait_ms',
      field: 'lock_wait_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        'Milliseconds asleep under a heavyweight lock wait event (wait_event_type Lock), including waits that ended in an error. Part of the partition of total_time_ms. Probe set `cpu` (always on).',
    },
    {
      column: 'lwlock_wait_ms',
      field: 'lwlock_wait_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description: 'Milliseconds asleep under an LWLock wait event. Part of the partition of total_time_ms. Probe set `cpu` (always on).',
    },
    {
      column: 'other_wait_ms',
      field: 'other_wait_ns',
      unit: 'ns',
      measuredBy: ['cpu'],
      description:
        'Milliseconds asleep for any other reason during a statement (pg_sleep, latches, IPC, client writes, spinlock delays). Part of the partition of total_time_ms. Probe set `cpu` (always on).',
    },
    {
      column: 'minflt',
      field: 'minflt',
      unit: 'count',
      measuredBy: ['cpu'],
      description: 'Minor page faults (count: no disk read needed). Probe set `cpu` (always on).',
    },
    {
      column: 'majflt',
      field: 'majflt',
      unit: 'count',
      measuredBy: ['cpu'],
      description: 'Major page faults (count: the page was read from disk). Probe set `cpu` (always on).',
    },
    {
      column: 'cpu_migrations',
      field: 'cpu_migrations',
      unit: 'count',
      measuredBy: ['cpu'],
      description: 'Times the scheduler moved the process to another CPU (count). Probe set `cpu` (always on).',
    },
    {
      column: 'nvcsw',
      field: 'nvcsw',
      unit: 'count',
      measuredBy: ['cpu'],
      description: 'Voluntary context switches (count: the process went to sleep). Probe set `cpu` (always on).',
    },
    {
      column: 'nivcsw',
      field: 'nivcsw',
      unit: 'count',
      measuredBy: ['cpu'],
      description: 'Involuntary context switches (count: the process was preempted). Probe set `cpu` (always on).',
    },
  ],
});
