/* SPDX-License-Identifier: MIT */
/*
 * LLC references and misses per backend and per query, from sampled perf events.
 *
 * User space opens one event per CPU (pid -1) with a sample period and attaches
 * on_llc_reference / on_llc_miss to it; the event type and config are user space's choice
 * (hardware cache events on a host with a PMU; a software event proves the same path in CI).
 * Each sample adds its period to the task that was running, when it is a postmaster child
 * the sched_switch program already tracks, and to the query it is on now (st_query_id).
 */
#ifndef LLC_BPF_H
#define LLC_BPF_H

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
	r = bpf_map_lookup_elem(&backends, &pid);
	if (!r || (r->flags & BACKEND_EXCLUDED))
		return 0;
	if (miss)
		__sync_fetch_and_add(&r->m.llc_misses, period);
	else
		__sync_fetch_and_add(&r->m.llc_references, period);
	if (!read_current(task, r, pid, &key, NULL))
		return 0;
	qm = query_metrics(&key);
	if (!qm)
		return 0;
	if (miss)
		qm->llc_misses += period;
	else
		qm->llc_references += period;
	return 0;
}

#endif /* LLC_BPF_H */
