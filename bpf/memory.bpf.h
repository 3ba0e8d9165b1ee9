/* SPDX-License-Identifier: MIT */
/*
 * The memory family (set "memory", default where the tracepoints exist): stalls a backend
 * suffers inside the kernel's memory management.
 *
 * Direct reclaim, memcg reclaim and direct compaction run in the context of the task that
 * allocates, so `current` is the backend: begin stores a timestamp per task (mem_stalls,
 * keyed by pid), end adds the elapsed time. These are OVERLAY figures: the stall is wall time
 * the cpu family has already put into on_cpu_ms (reclaim mostly runs) or into a wait (it may
 * sleep on writeback or congestion), so reclaim_ns / compaction_ns are "of which" amounts
 * inside total_ns, not extra components of its partition.
 */
#ifndef MEMORY_BPF_H
#define MEMORY_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "maps.bpf.h"
#include "attribution.bpf.h"

/* A task inside reclaim and/or compaction. */
struct mem_stall {
	__u64 reclaim_start_ns;
	__u64 compaction_start_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct mem_stall);
} mem_stalls SEC(".maps");

/* The stall record of `pid`; with `create`, made empty when absent (NULL, counted, when mem_stalls is full). */
static __always_inline struct mem_stall *stall_of(__u32 pid, bool create)
{
	static const struct mem_stall empty_stall = {};

	if (!create)
		return bpf_map_lookup_elem(&mem_stalls, &pid);
	return map_lookup_or_init(&mem_stalls, &pid, &empty_stall, COUNTER_MEM_STALLS_FULL);
}

static __always_inline void stall_done(__u32 pid, struct mem_stall *s)
{
	if (!s->reclaim_start_ns && !s->compaction_start_ns)
		bpf_map_delete_elem(&mem_stalls, &pid);
}

static __always_inline void reclaim_begin(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct mem_stall *s;

	if (!is_postmaster_family(task))
		return;
	/*
	 * Reclaim does not nest (PF_MEMALLOC keeps a reclaiming task out of reclaim), so a start
	 * left by a stall whose end we missed (detached in between) is simply overwritten.
	 */
	s = stall_of(task->pid, true);
	if (s)
		s->reclaim_start_ns = bpf_ktime_get_ns();
}

static __always_inline void reclaim_end(__u64 nr_reclaimed)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct backend_record *r;
	struct query_key key = {};
	struct mem_stall *s;
	struct metrics *qm;
	__u32 pid;
	__u64 ns;

	if (!is_postmaster_family(task))
		return;
	pid = task->pid;
	s = stall_of(pid, false);
	if (!s || !s->reclaim_start_ns)
		return; /* began before we attached */
	ns = bpf_ktime_get_ns() - s->reclaim_start_ns;
	s->reclaim_start_ns = 0;
	stall_done(pid, s);

	if (!memio_backend(task, pid, &r, &key))
		return;
	if (r) {
		r->m.reclaim_ns += ns;
		note_busy(ns);
		r->m.reclaim_pages += nr_reclaimed;
	}
	qm = statement_metrics(r, &key);
	if (qm) {
		qm->reclaim_ns += ns;
		qm->reclaim_pages += nr_reclaimed;
	}
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(on_dreclaim_beg)
{
	reclaim_begin();
	return 0;
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(on_dreclaim_end, unsigned long nr_reclaimed)
{
	reclaim_end(nr_reclaimed);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(on_mreclaim_beg)
{
	reclaim_begin();
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(on_mreclaim_end, unsigned long nr_reclaimed)
{
	reclaim_end(nr_reclaimed);
	return 0;
}

/* compact_zone(): direct compaction when a backend runs it (kcompactd is no postmaster child). */
SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(on_compact_beg)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct mem_stall *s;

	if (!is_postmaster_family(task))
		return 0;
	s = stall_of(task->pid, true);
	if (s)
		s->compaction_start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(on_compact_end)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct backend_record *r;
	struct query_key key = {};
	struct mem_stall *s;
	struct metrics *qm;
	__u32 pid;
	__u64 ns;

	if (!is_postmaster_family(task))
		return 0;
	pid = task->pid;
	s = stall_of(pid, false);
	if (!s || !s->compaction_start_ns)
		return 0;
	ns = bpf_ktime_get_ns() - s->compaction_start_ns;
	s->compaction_start_ns = 0;
	stall_done(pid, s);

	if (!memio_backend(task, pid, &r, &key))
		return 0;
	if (r) {
		r->m.compaction_ns += ns;
		note_busy(ns);
	}
	qm = statement_metrics(r, &key);
	if (qm)
		qm->compaction_ns += ns;
	return 0;
}

#endif /* MEMORY_BPF_H */
