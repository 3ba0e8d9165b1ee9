/* SPDX-License-Identifier: MIT */
/*
 * The llc family (opt-in set "llc"): LLC references and misses per backend and per query,
 * from sampled perf events.
 *
 * User space opens one event per CPU (pid -1) with a sample period and attaches
 * on_llc_reference / on_llc_miss to it; the event type and config are user space's choice
 * (hardware cache events on a host with a PMU; a software event proves the same path in CI).
 * Each sample adds its period to the task that was running, when it is a postmaster child
 * the sched_switch program already tracks, and to the query it is on now (st_query_id).
 */
#ifndef LLC_BPF_H
#define LLC_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

static __always_inline int llc_sample(__u64 period, bool miss)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = task->pid;
	struct backend_record *r;
	struct query_key key = {};
	struct metrics *qm;

	if (!is_postmaster_family(task))
		return 0;
	/* Only tasks the sched_switch program created: never allocate from this (NMI) context. */
	r = reported_backend(pid);
	if (!r)
		return 0;
	if (miss)
		__sync_fetch_and_add(&r->m.llc_misses, period);
	else
		__sync_fetch_and_add(&r->m.llc_references, period);
	if (!read_current(task, r, pid, &key, NULL))
		return 0;
	qm = statement_metrics(r, &key);
	if (!qm)
		return 0;
	if (miss)
		qm->llc_misses += period;
	else
		qm->llc_references += period;
	return 0;
}

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

#endif /* LLC_BPF_H */
