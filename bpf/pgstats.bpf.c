// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The collector's BPF object.
 *
 * Default set ("cpu"): one tp_btf program on sched_switch, filtered to the postmaster and
 * its children in two loads. It splits each backend's wall time into on-CPU, run-queue and
 * off-CPU waits (by the kernel's iowait flag and Postgres' own wait event) and attributes
 * it to the backend and to its current query. Cost: one switch-out event per context switch
 * of a backend, no uprobes.
 *
 * Opt-in set ("query"): a uprobe where each top-level statement ends gives exact call counts.
 * It costs a trap (~4 us here) per statement, which is why it is not in the default set.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "attribution.bpf.h"
#include "memory-io.bpf.h"
#include "llc.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (is_postmaster_family(prev))
		account_switch_out(prev, preempt, prev_state, false);
	return 0;
}

/*
 * Default set, with on_sched_switch: a CPU-clock sample every 100 ms on each CPU accounts the
 * backend running there as if it had been preempted, so a long CPU-bound statement that never
 * leaves its CPU shows its time in bpf_stats while it runs (about 20 runs a second on 2 CPUs).
 */
SEC("perf_event")
int on_cpu_tick(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (is_postmaster_family(task))
		account_switch_out(task, true, TASK_RUNNING, true);
	return 0;
}

/*
 * The end of one top-level statement: a uprobe on the query__execute__done site inside
 * PortalRun, or a uretprobe on PortalRun where the build has no USDT. Reads no probe
 * arguments, so it is a plain uprobe program either way.
 */
SEC("uprobe")
int BPF_KPROBE(on_query_done)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = bpf_map_lookup_elem(&backends, &pid);
	struct query_key key = {};
	struct metrics *qm;

	if (!r || (r->flags & BACKEND_EXCLUDED))
		return 0;
	r->m.calls++;
	/* No wait event wanted: a statement ending is not a sleep. */
	if (!read_current(bpf_get_current_task_btf(), r, pid, &key, NULL))
		return 0;
	qm = query_metrics(&key);
	if (qm)
		qm->calls++;
	return 0;
}

/* Opt-in lock families (`locks`, `lwlock`, `spinlock`). */
#include "locks.bpf.h"

/*
 * Opt-in set "llc": one sampled perf event per CPU for each program; the event itself
 * (hardware LLC events, or a software event in tests) is chosen by user space.
 */
SEC("perf_event")
int on_llc_reference(struct bpf_perf_event_data *ctx)
{
	return llc_sample(ctx->sample_period, false);
}

SEC("perf_event")
int on_llc_miss(struct bpf_perf_event_data *ctx)
{
	return llc_sample(ctx->sample_period, true);
}
