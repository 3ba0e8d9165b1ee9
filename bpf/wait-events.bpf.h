/* SPDX-License-Identifier: MIT */
/*
 * Off-CPU time per Postgres wait event (the cpu family, default set "cpu"): each sleep that the
 * cpu family charges (bpf/cpu.bpf.h, account_switch_out) is also charged, with its length and
 * one wait, to the wait event the backend had set when it went to sleep (wait_event_info, read
 * at that switch-out from *my_wait_event_info): per query key and per backend. User space names
 * the ids per PostgreSQL version (src/families/waits/).
 *
 * Per query: the sleeps the query's wait columns hold (io, lock, lwlock, other wait), so they
 * sum to io_wait_ms + lock_wait_ms + lwlock_wait_ms + other_wait_ms; waits before the statement
 * had its query id stay under queryid 0. Per backend: those, and its idle time waiting for the
 * client (Client:ClientRead), which is in no column.
 *
 * Both maps are bounded hashes, allocated on demand like the queries map; a full map refuses
 * the key (counted), and the collector evicts quiet keys after each written flush so the map heals.
 */
#ifndef WAIT_EVENTS_BPF_H
#define WAIT_EVENTS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "maps.bpf.h"
#include "lock-waits.bpf.h"

/* A query and a wait event: pg_wait_sampling's profile key. */
struct wait_event_key {
	struct query_key q;
	__u32 wait_event_info; /* 0: asleep without a wait event set (a page fault, reclaim) */
	__u32 pad;
};

/*
 * A process, as its record in backends / exited_backends is keyed (the collector writes it under
 * that record's backend_stats row), and a wait event.
 */
struct backend_wait_key {
	__u32 pid;              /* the kernel's pid, the backends map's key */
	__u32 wait_event_info;
	__u64 task_start_ns;    /* the task's start (CLOCK_MONOTONIC): a pid given again is another key */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct wait_event_key);
	__type(value, struct wait_totals);
} query_wait_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_wait_key);
	__type(value, struct wait_totals);
} backend_wait_events SEC(".maps");

/*
 * The sleep of `r` that just ended, `ns` long: to its backend and, when `to_query` (the cpu family
 * charged it to the query's wait columns), to its query. A sleep the scheduler did not call one
 * (a preempted task's rounding, class SLEEP_NONE) adds its time without a wait. A global function,
 * verified once per program (see query_add_wait in bpf/cpu.bpf.h).
 */
__noinline int wait_events_add(const struct backend_record *r, __u32 pid, __u64 ns, __u32 to_query)
{
	struct backend_wait_key bk = {};
	struct wait_event_key qk = {};
	__u64 waits;

	if (!r)
		return 0;
	waits = r->sleep_class != SLEEP_NONE;
	bk.pid = pid;
	bk.wait_event_info = r->sleep_wait_event;
	bk.task_start_ns = r->task_start_ns;
	add_totals(&backend_wait_events, &bk, waits, ns, COUNTER_BACKEND_WAIT_EVENTS_FULL);
	if (!to_query)
		return 0;
	qk.q = r->sleep_key;
	qk.wait_event_info = r->sleep_wait_event;
	add_totals(&query_wait_events, &qk, waits, ns, COUNTER_WAIT_EVENTS_FULL);
	return 1;
}

#endif /* WAIT_EVENTS_BPF_H */
