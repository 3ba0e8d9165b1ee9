/* SPDX-License-Identifier: MIT */
/*
 * Off-CPU time per Postgres wait event (the cpu family, default set "cpu"): each sleep that the
 * cpu family charges (bpf/cpu.bpf.h, account_switch_out) is also charged, with its length and
 * one wait, to the wait event the backend had set when it went to sleep (wait_event_info, read
 * at that switch-out from *my_wait_event_info): per query key and per backend. User space names
 * the ids per PostgreSQL version (src/families/waits/).
 *
 * Per query: the sleeps the query's wait columns hold (io, lock, lwlock, other wait); waits
 * before the statement had its query id stay under queryid 0. Per backend: the same sleeps; its
 * sleeps waiting for the client (ClientRead, mostly idle between statements, in no column) are
 * counted in its record instead (client_waits, client_wait_ns): one per transaction of an OLTP
 * backend, two adds there instead of a map update. So is the remainder of a preempted task's
 * interval (interrupt time the scheduler's clocks tell apart, in other_wait, with no wait
 * event): per backend only (unclassed_ns), no query's. A backend's first BACKEND_WAIT_SLOTS
 * other events are counted in its record too (wait_slot_*), and a query's first
 * QUERY_WAIT_SLOTS on a CPU in that CPU's copy of its queries entry; the maps only have the
 * ones after: a map entry, rarely touched, is cold by the next sleep in that event (about a
 * microsecond a lookup, bench/switch-parts.ts), while the record and the queries entry were
 * just read.
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
#include "wait-blockers.bpf.h"
#include "part-timing.bpf.h"

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
	__u32 pid; /* the kernel's pid, the backends map's key */
	__u32 wait_event_info;
	__u64 task_start_ns; /* the task's start (CLOCK_MONOTONIC): a pid given again is another key */
};

/*
 * Sleeps in one event and their time, and the run-queue wait after each wake-up until the task
 * ran again: the event was still set meanwhile (pg_stat_activity, and a sampler, see it), though
 * the cpu family counts that time as run-queue wait.
 */
struct wait_event_totals {
	__u64 waits;
	__u64 wait_ns;
	__u64 runq_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct wait_event_key);
	__type(value, struct wait_event_totals);
} query_wait_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct backend_wait_key);
	__type(value, struct wait_event_totals);
} backend_wait_events SEC(".maps");

static __always_inline void add_wait_event(void *map, const void *key, __u64 ns, __u64 runq_ns,
					   enum counter_index full_counter)
{
	static const struct wait_event_totals zero = {};
	struct wait_event_totals *t = map_lookup_or_insert(map, key, &zero, full_counter);

	if (!t)
		return;
	/*
	 * No note_change() for an added sleep or a new key: a statement's sleep notes its query's change anyway, and
	 * a background process's idle sleeps (a latch every few hundred ms) are not a change, so an idle
	 * server's flushes stay quiet and the heartbeat writes them, as it writes their records.
	 */
	__sync_fetch_and_add(&t->waits, 1);
	__sync_fetch_and_add(&t->wait_ns, ns);
	__sync_fetch_and_add(&t->runq_ns, runq_ns);
}

/* How many of a record's or a queries entry's slots to use (tests set 0: every event to the maps, to fill them with few processes). */
const volatile __u32 wait_slots_used = BACKEND_WAIT_SLOTS;

/*
 * The sleep to the slot of its event among the `n` whose fields are the arrays given (a record's,
 * or a queries entry's on this CPU), claiming a free one for a new event; false when every slot is
 * another event's (the map has it then). The event is stored before the first wait: the
 * collector, copying the slots meanwhile, sees a slot's waits and then its event.
 */
static __always_inline bool wait_slot_add(__u64 *waits, __u64 *wait_ns, __u64 *runq, __u32 *events, const int n,
					  __u32 wait_event, __u64 ns, __u64 runq_ns)
{
	int i;

#pragma unroll
	for (i = 0; i < n; i++) {
		if (i >= wait_slots_used)
			break;
		if (!waits[i]) {
			events[i] = wait_event;
			barrier();
		} else if (events[i] != wait_event) {
			continue;
		}
		waits[i]++;
		wait_ns[i] += ns;
		runq[i] += runq_ns;
		return true;
	}
	return false;
}

/* wait_slot_add() on the WAIT_SLOTS of `holder` (a record, a queries entry), as many as it has. */
#define WAIT_SLOT_ADD(holder, wait_event, ns, runq_ns)                                                              \
	wait_slot_add((holder)->wait_slot_waits, (holder)->wait_slot_ns, (holder)->wait_slot_runq_ns,               \
		      (holder)->wait_slot_event, sizeof((holder)->wait_slot_event) / sizeof(__u32), wait_event, ns, \
		      runq_ns)

/*
 * A statement's sleep, in wait event `wait_event`, to its queries entry `v` on this CPU, which the
 * switch-out has just looked up and added the sleep's time to: no second lookup of a
 * query_wait_events entry, rarely touched and cold (~1 µs; the slots take ~160 ns,
 * docs/measured.md). 0 when the entry's slots are other events' (wait_events_add puts it in
 * the map then). A global function: verified once, not on each path of the key's lookup-or-insert.
 */
__noinline int query_wait_slot_add(struct query_value *v, __u32 wait_event, __u64 ns, __u64 runq_ns)
{
	int added;

	if (!v)
		return 0;
	PART_BEGIN(PART_QUERY_WAIT_SLOT);
	added = WAIT_SLOT_ADD(v, wait_event, ns, runq_ns);
	PART_END(PART_QUERY_WAIT_SLOT);
	return added;
}

/* Where wait_events_add puts a sleep's event for its query. */
enum wait_event_query {
	WAIT_QUERY_NONE = 0,    /* not in a statement: the backend's only */
	WAIT_QUERY_MAP = 1,     /* in a statement: to query_wait_events */
	WAIT_QUERY_COUNTED = 2, /* in a statement, already in its queries entry's slot (query_wait_slot_add) */
};

/*
 * The sleep of `r` that just ended, `ns` long, and the run-queue wait after it (`runq_ns`: the
 * task's run delay since its last switch-out, from its wake-up on): to its backend and, in a
 * statement (`query`, enum wait_event_query), to its query unless already counted there, and to
 * who woke it (the blockers set). A global function, verified once per program (see
 * query_add_wait in bpf/cpu.bpf.h).
 */
__noinline int wait_events_add(struct backend_record *r, __u32 pid, __u64 ns, __u64 runq_ns, __u32 query)
{
	struct backend_wait_key bk = {};
	struct wait_event_key qk = {};

	if (!r)
		return 0;
	{
		PART_BEGIN(PART_BACKEND_WAIT_MAP);
		if (!WAIT_SLOT_ADD(r, r->sleep_wait_event, ns, runq_ns)) {
			bk.pid = pid;
			bk.wait_event_info = r->sleep_wait_event;
			bk.task_start_ns = r->task_start_ns;
			add_wait_event(&backend_wait_events, &bk, ns, runq_ns, COUNTER_BACKEND_WAIT_EVENTS_FULL);
		}
		PART_END(PART_BACKEND_WAIT_MAP);
	}
	if (query == WAIT_QUERY_NONE)
		return 0;
	qk.q = r->sleep_key;
	qk.wait_event_info = r->sleep_wait_event;
	if (query == WAIT_QUERY_MAP) {
		PART_BEGIN(PART_QUERY_WAIT_MAP);
		add_wait_event(&query_wait_events, &qk, ns, runq_ns, COUNTER_WAIT_EVENTS_FULL);
		PART_END(PART_QUERY_WAIT_MAP);
	}
	wait_blockers_add(r, &qk.q, qk.wait_event_info, ns);
	return 1;
}

#endif /* WAIT_EVENTS_BPF_H */
