import type { ProbeSetName } from '../families/index.js';

/** The oldest Linux a set's programs load on, and what of it they need that older kernels lack. */
export interface KernelNeeds {
  /** e.g. '5.12'. */
  since: string;
  why: string;
}

/*
 * Read from bpf/*.bpf.h: program types (tp_btf 5.5), helpers (bpf_get_ns_current_pid_tgid 5.7,
 * bpf_get_current_task_btf 5.11, in every tracing program type), tracepoints and their arguments,
 * global functions taking pointers (5.12). docs/install.md#requirements has the same table
 * (test/unit/verifier-refusal.test.ts compares them). Every set also needs the collector's own
 * programs, and runs beside the cpu set, so 5.12 is the floor of a run: the switch-out's global
 * functions taking pointers. sched_switch's prev_state argument (5.18) is not needed: before it,
 * on_switch_3args reads the state from the task (src/collector/switch-program.ts).
 */

/** What the collector's own programs need (finding and following the postmaster: bpf/instance.bpf.h). */
export const COLLECTOR_KERNEL_NEEDS: KernelNeeds = {
  since: '5.7',
  why: 'tp_btf programs (5.5); bpf_get_ns_current_pid_tgid (5.7)',
};

/** The same, per probe set. */
export const SET_KERNEL_NEEDS: Readonly<Record<ProbeSetName, KernelNeeds>> = {
  cpu: {
    since: '5.12',
    why: "global functions taking pointers (5.12); bpf_get_current_task_btf in tp_btf and perf_event programs (5.11); sched_switch's prev_state argument (5.18) or, before it, the task's state",
  },
  sched: { since: '5.12', why: "a switch in the cpu set's sched_switch program" },
  latency: { since: '5.12', why: "a switch in the cpu set's sched_switch program; tp_btf sched_process_exit (5.5)" },
  query: { since: '5.12', why: 'uprobes calling global functions taking pointers (5.12) and bpf_get_current_task_btf (5.11)' },
  nested: { since: '5.12', why: 'uprobes calling global functions taking pointers (5.12) and bpf_get_current_task_btf (5.11)' },
  locks: { since: '5.11', why: 'bpf_get_current_task_btf in USDT probes and uprobes (5.11)' },
  lwlock: { since: '5.11', why: 'bpf_get_current_task_btf in USDT probes and uprobes (5.11); bpf_probe_read_user_str (5.5)' },
  spinlock: { since: '5.11', why: 'bpf_get_current_task_btf in a uprobe (5.11)' },
  memory: { since: '5.11', why: 'tp_btf on the reclaim and compaction tracepoints (5.5); bpf_get_current_task_btf (5.11)' },
  io: { since: '6.5', why: 'tracepoint block_io_start (6.5); bpf_get_current_task_btf (5.11)' },
  aio: { since: '5.11', why: 'bpf_get_current_task_btf in uprobes (5.11)' },
  llc: { since: '5.11', why: 'bpf_get_current_task_btf in perf_event programs (5.11)' },
  blockers: { since: '5.11', why: 'tp_btf sched_waking (5.5); bpf_get_current_task_btf (5.11)' },
};

/** "needs Linux 5.12+: ..." for a set's line. */
export function kernelNeedsText(needs: KernelNeeds): string {
  return `needs Linux ${needs.since}+: ${needs.why}`;
}
