/* SPDX-License-Identifier: MIT */
/*
 * Who ended each wait (opt-in set "blockers", the waits family): the process that woke a
 * sleeping backend, recorded as its backend type and the query it was on, per (waiter's query
 * key, waiter's wait event): bpf_stats.query_wait_blockers.
 *
 * sched_waking runs in the waker's own context (try_to_wake_up, before the wakee is queued,
 * possibly on another CPU), so `current` is the waker unless the wake-up comes from an
 * interrupt (a timer ending pg_sleep, a device, the network), which this CPU's preempt count
 * tells. PostgreSQL wakes a waiter from the process that ends the wait: SetLatch() signals the
 * latch's owner (a lock holder at its commit, a walsender releasing synchronous commits, a
 * backend ending a buffer's IO), LWLockRelease() posts the waiter's semaphore (a futex wake).
 *
 * Only a wake-up that ends a sleep the cpu family charges counts: the wakee off its run queue
 * (one that has not left its CPU yet never slept), in a sleep that is not idle time (ClientRead).
 * The waker is left in the wakee's record with the start of that sleep (its last_ts); the
 * switch-out that ends the sleep (wait_events_add in bpf/wait-events.bpf.h) adds the sleep, with
 * the same length query_wait_events gets, under that waker, and drops what it left. With the set
 * detached nothing is left, and that switch-out pays one compare.
 *
 * The map is a bounded hash like the wait-event maps: a full map refuses the key (counted),
 * and the collector evicts quiet keys after each written flush so the map heals.
 */
#ifndef WAIT_BLOCKERS_BPF_H
#define WAIT_BLOCKERS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "records.h"
#include "maps.bpf.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

/* A query, the wait event it slept in, and who woke it. */
struct wait_blocker_key {
	struct query_key q;
	__u32 wait_event_info;
	__u32 pad;
	struct wait_waker waker;
};

/* Sleeps ended by one waker and their time (switch-out to wake-up, as query_wait_events counts it). */
struct wait_blocker_totals {
	__u64 waits;
	__u64 wait_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct wait_blocker_key);
	__type(value, struct wait_blocker_totals);
} query_wait_blockers SEC(".maps");

/*
 * Offsets of the per-CPU variables runqueues and __preempt_count in the kernel's per-CPU section
 * (from its BTF, src/postmaster/kernel-percpu.ts); 0 for both: not known. A __ksym variable would
 * need its address in /proc/kallsyms, which a kernel without CONFIG_KALLSYMS_ALL (this one)
 * does not list, so this CPU's preempt count is found from this CPU's run queue instead.
 */
const volatile __u32 runqueues_percpu_off = 0;
const volatile __u32 preempt_count_percpu_off = 0;

#define PF_KTHREAD 0x00200000 /* as bpf/cpu.bpf.h defines it */

/* Preempt count bits: hard irq and NMI, and serving a softirq (not merely bottom halves disabled). */
#define PREEMPT_SOFTIRQ_SERVING 0x00000100
#define PREEMPT_HARDIRQ_NMI     0x00ff0000

/*
 * Whether this wake-up comes from an interrupt (a timer, a device, the network), whatever task it
 * interrupted: this CPU's preempt count, at its run queue's per-CPU base. `current_task` runs on
 * this CPU, so its CFS run queue belongs to this CPU's rq. Without the offsets, only an
 * interrupted idle CPU is told apart (its task is the idle task, pid 0).
 */
static __always_inline bool in_interrupt_context(struct task_struct *current_task)
{
	__u64 rq = 0;
	int count = 0;

	if ((runqueues_percpu_off || preempt_count_percpu_off) && bpf_core_field_exists(current_task->se.cfs_rq)) {
		rq = (__u64)BPF_CORE_READ(current_task, se.cfs_rq, rq);
		if (rq && !bpf_probe_read_kernel(&count, sizeof(count),
						 (void *)(rq - runqueues_percpu_off + preempt_count_percpu_off)))
			return count & (PREEMPT_SOFTIRQ_SERVING | PREEMPT_HARDIRQ_NMI);
	}
	return current_task->pid == 0;
}

/* Who is waking a task now: `current`, unless this is an interrupt. */
static __always_inline void waker_of_current(struct wait_waker *w)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = task->pid;
	struct backend_record *r;

	w->backend_type = -1;
	if (in_interrupt_context(task)) {
		w->kind = WAKER_INTERRUPT;
		return;
	}
	if (task->flags & PF_KTHREAD) {
		w->kind = WAKER_KERNEL_THREAD;
		return;
	}
	if (task->tgid == postmaster_tgid) {
		w->kind = WAKER_POSTMASTER;
		return;
	}
	if (task->real_parent->tgid != postmaster_tgid) {
		w->kind = WAKER_OTHER_PROCESS;
		return;
	}
	w->kind = WAKER_PROCESS;
	r = task_record(task, pid);
	if (!r)
		return; /* a child not seen to leave its CPU yet: its type is not known */
	/* The query it is on now: read from its own PgBackendStatus, as at its switch-outs. */
	if (read_current_state(task, r, pid, &w->key, NULL, NULL) && !w->key.queryid)
		__builtin_memset(&w->key, 0, sizeof(w->key));
	w->backend_type = r->backend_type;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_sched_waking, struct task_struct *p)
{
	struct backend_record *r;
	__u32 pid;

	if (!is_postmaster_family(p) || p->on_rq)
		return 0;
	pid = p->pid;
	r = task_record(p, pid);
	if (!r || (r->flags & BACKEND_EXCLUDED) || !r->last_ts || r->sleep_class == SLEEP_CLIENT ||
	    r->sleep_class == SLEEP_NONE)
		return 0;
	__builtin_memset(&r->waker, 0, sizeof(r->waker));
	waker_of_current(&r->waker);
	r->waker_sleep_ts = r->last_ts;
	return 0;
}

/*
 * The sleep of `r` that just ended (`ns` long), charged to query key `q` and wait event
 * `wait_event_info`: to the waker the blockers set saw end it, if it saw one. Called by
 * wait_events_add before the record's last_ts moves on.
 */
static __always_inline void wait_blockers_add(struct backend_record *r, const struct query_key *q,
					      __u32 wait_event_info, __u64 ns)
{
	static const struct wait_blocker_totals zero = {};
	struct wait_blocker_key key = {};
	struct wait_blocker_totals *t;

	if (r->waker_sleep_ts != r->last_ts)
		return;
	r->waker_sleep_ts = 0;
	key.q = *q;
	key.wait_event_info = wait_event_info;
	key.waker = r->waker;
	t = map_lookup_or_insert(&query_wait_blockers, &key, &zero, COUNTER_WAIT_BLOCKERS_FULL);
	if (!t)
		return;
	__sync_fetch_and_add(&t->waits, 1);
	__sync_fetch_and_add(&t->wait_ns, ns);
}

#endif /* WAIT_BLOCKERS_BPF_H */
