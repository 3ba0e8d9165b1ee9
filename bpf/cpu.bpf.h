/* SPDX-License-Identifier: MIT */
/*
 * The cpu family (default set "cpu"; the sched set adds run-queue histograms through
 * bpf/latency.bpf.h): each backend's wall time split into on-CPU, run-queue and off-CPU waits
 * (by the kernel's iowait flag and Postgres' own wait event), and the scheduler's per-task
 * counters (SCHED_COUNTERS in bpf/records.h), attributed to the backend and to its current
 * query.
 *
 * One tp_btf program on sched_switch (of two: the loader picks the one this kernel's tracepoint
 * takes, src/collector/switch-program.ts), filtered to the postmaster and its children in two
 * loads, and a CPU-clock sample for backends that never leave their CPU. At each switch-out
 * the backend's query and wait event are read from its PgBackendStatus (bpf/pg-status.bpf.h)
 * and the scheduler's own cumulative counters from task_struct: a few loads, no uprobe. Each
 * sleep is also charged to its wait event (bpf/wait-events.bpf.h).
 */
#ifndef CPU_BPF_H
#define CPU_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "records.h"
#include "maps.bpf.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"
#include "latency.bpf.h"
#include "nested.bpf.h"
#include "wait-events.bpf.h"
#include "part-timing.bpf.h"

#define TASK_RUNNING 0x0000
#define TASK_DEAD    0x0080
#define PF_EXITING   0x00000004
#define PF_KTHREAD   0x00200000

static const struct backend_record empty_backend = {};

/*
 * The time of this context switch: __schedule() has just updated this CPU's rq->clock (the
 * clock run_delay is kept in), and three loads cost far less than bpf_ktime_get_ns, which was a
 * sixth of this handler's cost here. The rq is reached through the task's CFS runqueue; a kernel
 * without CONFIG_FAIR_GROUP_SCHED falls back to the helper (one clock either way).
 */
static __always_inline __u64 switch_time(struct task_struct *task)
{
	if (bpf_core_field_exists(task->se.cfs_rq)) {
		struct cfs_rq *cfs_rq = task->se.cfs_rq;

		if (cfs_rq)
			return cfs_rq->rq->clock;
	}
	return bpf_ktime_get_ns();
}

/* The task's SCHED_COUNTERS now. */
static __always_inline void sched_counts_read(struct sched_counts *c, struct task_struct *task)
{
#define READ_COUNTER(name, task_field) c->name = task->task_field;
	SCHED_COUNTERS(READ_COUNTER)
#undef READ_COUNTER
}

/* The task's counters as of `now`: its next interval starts here. */
static __always_inline void baseline(struct backend_record *r, struct task_struct *task, __u64 now, __u64 sum_exec)
{
	r->epoch = tracking_epoch;
	r->last_ts = now;
	r->last_sum_exec = sum_exec;
	r->last_run_delay = task->sched_info.run_delay;
	sched_counts_read(&r->last, task);
}

/* Start tracking a task: counters count from now (or from fork, for tasks born after attach). */
static __always_inline struct backend_record *track(struct task_struct *task, __u32 pid, __u64 now)
{
	struct backend_record *r;

	/* A kernel thread is never a Postgres process, whatever its parent's number. */
	if (task->flags & PF_KTHREAD)
		return NULL;
	r = map_lookup_or_init(&backends, &pid, &empty_backend, COUNTER_BACKENDS_FULL);
	if (!r)
		return NULL;
	r->backend_type = -1;
	r->task_start_ns = task->start_time;
	r->pg_pid = pg_pid_of(task);
	r->memory_cgroup = memory_cgroup_of(task);
	baseline(r, task, now, task->se.sum_exec_runtime);
	r->sleep_key.toplevel = 1;
	if (bpf_map_lookup_elem(&excluded_pids, &r->pg_pid))
		r->flags |= BACKEND_EXCLUDED;
	return r;
}

static __always_inline void add_wait(struct metrics *m, enum sleep_class sleep_class, __u64 ns)
{
	m->total_ns += ns;
	switch (sleep_class) {
	case SLEEP_IO:
		m->io_wait_ns += ns;
		break;
	case SLEEP_LOCK:
		m->lock_wait_ns += ns;
		break;
	case SLEEP_LWLOCK:
		m->lwlock_wait_ns += ns;
		break;
	default:
		m->other_wait_ns += ns;
		break;
	}
}

/* Whether add_wait() adds a sleep of this class to a busy figure (io, lock, lwlock wait). */
static __always_inline bool is_busy_sleep(enum sleep_class sleep_class)
{
	return sleep_class == SLEEP_IO || sleep_class == SLEEP_LOCK || sleep_class == SLEEP_LWLOCK;
}

/* What a task did between two switch-outs, apart from sleeping. */
struct slice {
	__u64 on_cpu_ns;
	__u64 runq_ns;
	struct sched_counts counts;
};

static __always_inline void add_slice(struct metrics *m, const struct slice *s)
{
	m->total_ns += s->on_cpu_ns + s->runq_ns;
	m->on_cpu_ns += s->on_cpu_ns;
	m->runq_ns += s->runq_ns;
#define ADD_COUNTER(name, task_field) m->name += s->counts.name;
	SCHED_COUNTERS(ADD_COUNTER)
#undef ADD_COUNTER
}

/*
 * The query side of a switch-out, as global functions: the verifier checks each once per
 * program, where inlined it walked the key's insert (the role's share, the race with another
 * CPU, the change notes) again on every path that reached one of the calls (bench/journal/start-up.md#six-cuts-to-the-start).
 * The pointers they take are checked for NULL, as the verifier requires of a global function.
 */
/* A sleep for query_add_wait: its class and length; with `to_slot`, also its event and the run-queue wait after it, for a wait slot. */
struct query_sleep {
	__u64 ns;
	__u64 runq_ns;
	__u32 sleep_class;
	__u32 wait_event;
	__u32 to_slot;
	__u32 pad;
};

/*
 * A sleep to the query's figures and, `to_slot` (a top-level statement's), its wait event to a
 * wait slot of the query's entry when one is the event's or free (not for SLEEP_NONE, which has
 * no event): 2 then, 1 when the event is still to be counted (wait_events_add), 0 when the key
 * was refused.
 */
__noinline int query_add_wait(const struct query_key *key, const struct query_sleep *sl)
{
	struct query_value *v;
	struct metrics *m;
	struct query_key k;

	if (!key || !sl || !key->queryid)
		return 0;
	k = *key; /* a map key from the stack: 6.1's verifier refuses an argument's memory as one */
	m = query_key_metrics_of(&k, 0, &v);
	if (!m)
		return 0;
	add_wait(m, sl->sleep_class, sl->ns);
	if (sl->to_slot && sl->sleep_class != SLEEP_NONE && v &&
	    query_wait_slot_add(v, sl->wait_event, sl->ns, sl->runq_ns))
		return 2;
	return 1;
}

__noinline int query_add_slice(const struct query_key *key, const struct slice *s)
{
	struct metrics *m;
	struct query_key k;

	if (!key || !s || !key->queryid)
		return 0;
	k = *key; /* as in query_add_wait */
	m = query_key_metrics(&k);
	if (!m)
		return 0;
	add_slice(m, s);
	return 1;
}

static __always_inline enum sleep_class classify_sleep(struct task_struct *task, bool preempt, unsigned int state,
						       __u32 wait_event)
{
	if (preempt || state == TASK_RUNNING || (state & TASK_DEAD))
		return SLEEP_NONE;
	/*
	 * Waiting for the client (idle reads as ClientRead) is no statement's, even when the kernel
	 * marks the sleep iowait: a major fault between statements (the binary's text paged back in)
	 * would otherwise land in the last statement's io_wait as a ClientRead event.
	 */
	if (wait_event == client_read_event)
		return SLEEP_CLIENT;
	if (BPF_CORE_READ_BITFIELD(task, in_iowait))
		return SLEEP_IO;
	switch (wait_event & PG_WAIT_CLASS_MASK) {
	case PG_WAIT_LOCK:
		return SLEEP_LOCK;
	case PG_WAIT_LWLOCK:
		return SLEEP_LWLOCK;
	case PG_WAIT_IO:
		return SLEEP_IO;
	default:
		return SLEEP_OTHER;
	}
}

/*
 * For a task that is on its CPU right now (a periodic sample, not a context switch): the time
 * of the runqueue's last clock update, and the task's CPU time up to that same moment. The
 * scheduler adds the running slice to sum_exec_runtime only at its own updates, so the part
 * since se.exec_start (kept in the rq's clock_task) is added here, or a running task would look
 * as if it had slept.
 */
static __always_inline __u64 running_time(struct task_struct *task, __u64 *sum_exec)
{
	struct cfs_rq *cfs_rq = task->se.cfs_rq;
	__u64 clock_task, start;

	*sum_exec = task->se.sum_exec_runtime;
	if (!cfs_rq)
		return bpf_ktime_get_ns();
	clock_task = cfs_rq->rq->clock_task;
	start = task->se.exec_start;
	if (clock_task > start)
		*sum_exec += clock_task - start;
	return cfs_rq->rq->clock;
}

/*
 * What one switch-out works with, kept off the program's stack. The verifier allows 512 bytes
 * for a whole call chain (each frame rounded up to 16) and, without a private stack (Debian's
 * 6.1 and 6.12, some 6.18 hosts), this program and the global functions it calls share them:
 * with these on the stack the chain was 528 bytes and the program was refused
 * (scripts/bpf-stack-budget.mjs checks every build). One per CPU and per entry point: a
 * switch-out runs with interrupts off, and the CPU-clock tick in interrupt context, so neither
 * is interrupted by another of its kind on its CPU. A uprobe's program runs with migration off
 * but, on recent kernels, preemptible (bpf_prog_run_array_uprobe): another task's uprobe may
 * run on the same CPU meanwhile, so that slot is claimed (`busy`) and a second claimant skips
 * its switch-out (counted): its slice then goes with the task's next one, nothing is lost.
 */
struct switch_scratch {
	__u64 busy;              /* SWITCH_FROM_PROBE's slot only: a uprobe's switch-out is using it */
	struct query_key key;    /* the query the backend is on now */
	struct query_key nested; /* a nested statement's key (the nested set) */
	struct slice slice;      /* what it did on and waiting for a CPU since its previous switch-out */
	struct sched_counts counts;
	struct query_sleep sleep; /* the sleep that ended, for query_add_wait */
};

enum switch_entry {
	SWITCH_FROM_SCHED = 0, /* on_sched_switch */
	SWITCH_FROM_TICK = 1,  /* on_cpu_tick */
	SWITCH_FROM_PROBE = 2, /* a uprobe: a statement's or an executor's end (bpf/query.bpf.h) */
	SWITCH_ENTRIES = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SWITCH_ENTRIES);
	__type(key, __u32);
	__type(value, struct switch_scratch);
} switch_scratch SEC(".maps");

/*
 * Step 1 of a switch-out: the task's record, made at its first switch-out; NULL when there is
 * nothing to account (a sample of an untracked task, an older process's record retired, one of
 * the collector's own connections).
 */
static __always_inline struct backend_record *switch_record(struct task_struct *task, __u32 pid, __u64 now, bool dead,
							    bool running)
{
	struct backend_record *r = bpf_map_lookup_elem(&backends, &pid);

	if (r && r->task_start_ns != task->start_time) {
		/* An earlier process's record under this pid (see task_record): closed as of now. */
		if (!r->exited_ns)
			r->exited_ns = bpf_ktime_get_ns();
		retire_backend(r, pid);
		r = bpf_map_lookup_elem(&backends, &pid);
		if (r)
			return NULL; /* exited_backends is full (counted): tracked after the next flush */
	}
	if (!r) {
		/* A sample never starts tracking: the task's next switch-out does. */
		if (dead || running)
			return NULL;
		r = track(task, pid, now);
		if (!r)
			return NULL;
		if (r->task_start_ns < tracking_since_ns)
			return NULL; /* older than the collector: baseline taken, count from the next switch */
		/*
		 * Forked since: its counters started at zero at fork, so nothing is lost. A new task is
		 * runnable from fork to its first switch-out, so that interval has no sleep in it.
		 */
		r->last_ts = now - task->se.sum_exec_runtime - task->sched_info.run_delay;
		r->last_sum_exec = 0;
		r->last_run_delay = 0;
		__builtin_memset(&r->last, 0, sizeof(r->last));
	}
	if (r->flags & BACKEND_EXCLUDED) {
		/*
		 * One of the collector's own connections leaves: its exclusion ends with it, so the
		 * set holds live connections only, whatever the number of reconnections (a pid
		 * reused later is a stranger again). Reached by the collector's backends only.
		 */
		if (dead) {
			__u32 pg_pid = r->pg_pid; /* the exclusion's key: the pid as Postgres knows it */

			bpf_map_delete_elem(&excluded_pids, &pg_pid);
			bpf_map_delete_elem(&backends, &pid);
			note_change();
		}
		return NULL;
	}
	return r;
}

/*
 * Step 2: the sleep that ended this interval, `sleep_ns` long, to the record and to the query
 * it began in (held if that was before the statement had an id), and to the nested statement
 * it began in (the nested set). Returns query_add_wait's answer, for the wait-events step.
 */
static __always_inline int charge_sleep(struct switch_scratch *sc, struct backend_record *r, __u64 sleep_ns,
					bool waits_off)
{
	int added = 0;

	if (!sleep_ns || r->sleep_class == SLEEP_CLIENT)
		return 0;
	__builtin_memset(&sc->sleep, 0, sizeof(sc->sleep));
	add_wait(&r->m, r->sleep_class, sleep_ns);
	if (r->flags & BACKEND_SLEEP_HELD) {
		add_wait(&r->held, r->sleep_class, sleep_ns);
	} else if (!statement_refused(r, &r->sleep_key)) {
		sc->sleep.ns = sleep_ns;
		sc->sleep.runq_ns = sc->slice.runq_ns;
		sc->sleep.sleep_class = r->sleep_class;
		sc->sleep.wait_event = r->sleep_wait_event;
		sc->sleep.to_slot = !waits_off;
		added = query_add_wait(&r->sleep_key, &sc->sleep);
		if (!added)
			refuse_statement(r, &r->sleep_key);
	}
	if (r->nested_sleep_queryid) {
		sc->nested = nested_key(&r->sleep_key, r->nested_sleep_queryid, r->nested_sleep_userid);
		sc->sleep.ns = sleep_ns;
		sc->sleep.sleep_class = r->sleep_class;
		sc->sleep.to_slot = 0; /* the wait events are the top-level statement's */
		query_add_wait(&sc->nested, &sc->sleep);
	}
	return added;
}

/*
 * Step 3: the same sleep by its wait event: waiting for the client in the record (no query's),
 * any other to the backend's and the statement's (bpf/wait-events.bpf.h). A runnable task's
 * remainder (SLEEP_NONE: interrupt time of a preempted slice) has no event: the record keeps it
 * too. Its cost per switch: bench/switch-parts.ts (PART_TIMING builds only).
 */
static __always_inline void charge_wait_event(struct backend_record *r, __u32 pid, __u64 sleep_ns, __u64 runq_ns,
					      int added, bool waits_off)
{
	__u32 query = WAIT_QUERY_NONE;

	if (waits_off || !sleep_ns)
		return; /* waits_off: bench/switch-parts.ts --ab, the half without them */
	if (r->sleep_class == SLEEP_CLIENT) {
		r->client_waits++;
		r->client_wait_ns += sleep_ns;
		return;
	}
	if (r->sleep_class == SLEEP_NONE) {
		r->unclassed_ns += sleep_ns;
		return;
	}
	if (added == 2)
		query = WAIT_QUERY_COUNTED;
	else if (r->sleep_key.queryid || (r->flags & BACKEND_SLEEP_HELD))
		query = WAIT_QUERY_MAP;
	wait_events_add(r, pid, sleep_ns, runq_ns, query);
}

/*
 * Step 4: the run-queue wait and the CPU slice, to the record and to the query the backend is
 * on now (held while the statement has no id yet), and the held figures released once it has.
 */
static __always_inline void charge_slice(struct switch_scratch *sc, struct backend_record *r, bool holding)
{
	add_slice(&r->m, &sc->slice);
	if (holding) {
		add_slice(&r->held, &sc->slice);
	} else {
		if (!statement_refused(r, &sc->key) && !query_add_slice(&sc->key, &sc->slice))
			refuse_statement(r, &sc->key);
		if (r->nested_current) {
			sc->nested = nested_key(&sc->key, r->nested_current, r->nested_current_userid);
			query_add_slice(&sc->nested, &sc->slice);
		}
	}
	/* Held figures go to the id the statement now has, or to queryid 0 once it is over without one. */
	if (holding) {
		start_holding(r);
		r->flags |= BACKEND_SLEEP_HELD;
	} else if (r->flags & (BACKEND_HOLDING | BACKEND_SLEEP_HELD | BACKEND_HOLDING_LOCK_WAIT)) {
		if (r->flags & (BACKEND_HOLDING | BACKEND_HOLDING_LOCK_WAIT))
			release_held(r, &sc->key);
		r->flags &= ~BACKEND_SLEEP_HELD;
	}
}

/*
 * Account everything since the task's previous switch-out, now that it leaves the CPU:
 *   [previous switch-out] sleep ... [woken] run-queue wait ... on CPU ... [now]
 * The sleep belongs to the query the backend was waiting in; the run-queue wait and the CPU
 * slice belong to the query it is on now. On-CPU and run-queue time come from the scheduler's
 * own accounting (se.sum_exec_runtime, sched_info.run_delay); the sleep is the rest.
 *
 * `running`: called for the task on this CPU from a periodic sample rather than a switch-out;
 * it is accounted as if preempted, so a statement that never leaves its CPU still shows its time.
 * `entry`: which program calls (enum switch_entry), for its scratch slot.
 */
static __always_inline void switch_out_with(struct switch_scratch *sc, struct task_struct *task, bool preempt,
					    unsigned int state, bool running)
{
	__u32 pid = task->pid, wait_event = 0, status_state = 0;
	enum sleep_class next_class;
	__u64 running_sum_exec = 0;
	__u64 now = running ? running_time(task, &running_sum_exec) : switch_time(task);
	struct backend_record *r;
	__u64 sum_exec, run_delay, interval, sleep_ns;
	bool dead = state & TASK_DEAD, exiting, sleeping, holding = false;
	int added;                                /* query_add_wait's answer for the sleep that ended */
	const bool waits_off = WAIT_EVENTS_OFF(); /* false but in bench/switch-parts.ts --ab builds */

	r = switch_record(task, pid, now, dead, running);
	if (!r)
		return;

	sum_exec = running ? running_sum_exec : task->se.sum_exec_runtime;
	/* Kept across a pause: what the task did meanwhile belongs to nobody (zero interval below). */
	if (r->epoch != tracking_epoch)
		baseline(r, task, now, sum_exec);
	run_delay = task->sched_info.run_delay;
	sched_counts_read(&sc->counts, task);

	sc->slice.on_cpu_ns = sum_exec - r->last_sum_exec;
	sc->slice.runq_ns = run_delay - r->last_run_delay;
#define COUNTER_DELTA(name, task_field) sc->slice.counts.name = sc->counts.name - r->last.name;
	SCHED_COUNTERS(COUNTER_DELTA)
#undef COUNTER_DELTA
	interval = now - r->last_ts;
	sleep_ns = interval > sc->slice.on_cpu_ns + sc->slice.runq_ns
			   ? interval - sc->slice.on_cpu_ns - sc->slice.runq_ns
			   : 0;

	/*
	 * The wait event only classifies a sleep, so it is read only for a task going to sleep. An
	 * exiting task has already dropped its mm: its last known query stands, unless the task
	 * woke from waiting for its client (a Terminate, the socket closed): its exit is then no
	 * statement's. Charged to the last one, a refused statement got a row without its call.
	 */
	sleeping = !preempt && state != TASK_RUNNING && !dead;
	/*
	 * do_exit() drops the mm (exit_mm) well before the task is dead: a preemption or a sample in
	 * between found no status to read, and the slice since the previous switch-out went to no
	 * query (a parallel worker lost 2-4 ms of its statement's CPU time at most of its exits here).
	 */
	exiting = dead || (!task->mm && (task->flags & PF_EXITING));
	__builtin_memset(&sc->key, 0, sizeof(sc->key));
	if (exiting || !read_current_state(task, r, pid, &sc->key, sleeping ? &wait_event : NULL, &status_state)) {
		sc->key = r->sleep_key;
		if (!exiting || r->sleep_class == SLEEP_CLIENT)
			sc->key.queryid = 0;
	} else {
		holding = holds_before_query_id(r, &sc->key, status_state);
	}

	added = charge_sleep(sc, r, sleep_ns, waits_off);
	PART_BEGIN(PART_WAIT_EVENTS);
	charge_wait_event(r, pid, sleep_ns, sc->slice.runq_ns, added, waits_off);
	PART_END(PART_WAIT_EVENTS);
	charge_slice(sc, r, holding);
	note_busy(sc->slice.on_cpu_ns + (sleep_ns && is_busy_sleep(r->sleep_class) ? sleep_ns : 0));

	next_class = classify_sleep(task, preempt, state, wait_event);
	r->last_ts = now;
	r->last_sum_exec = sum_exec;
	r->last_run_delay = run_delay;
	r->last = sc->counts;
	hist_on_switch_out(r, &sc->key, sc->slice.runq_ns, next_class);
	nested_on_switch_out(r, status_state);
	/* Without the statement's start (statement_refused): waiting for the client between statements ends the mark. */
	if (!r->refused_start_us && next_class == SLEEP_CLIENT && (!status_state_off || is_idle_state(status_state)))
		r->refused_queryid = 0;
	r->sleep_class = next_class;
	r->sleep_wait_event = wait_event;
	r->sleep_key = sc->key;
	if (sc->key.queryid)
		r->queryid = sc->key.queryid;
	if (dead) {
		r->exited_ns = bpf_ktime_get_ns(); /* CLOCK_MONOTONIC, which user space turns into wall time */
		retire_backend(r, pid);
	}
}

/* switch_out_with() in the scratch slot of `entry` (enum switch_entry), the program that calls. */
static __always_inline void account_switch_out(struct task_struct *task, bool preempt, unsigned int state, bool running,
					       __u32 entry)
{
	struct switch_scratch *sc = bpf_map_lookup_elem(&switch_scratch, &entry);

	if (!sc)
		return;
	if (entry != SWITCH_FROM_PROBE) {
		switch_out_with(sc, task, preempt, state, running);
		return;
	}
	if (__sync_val_compare_and_swap(&sc->busy, 0, 1) != 0) {
		count(COUNTER_SWITCH_SCRATCH_BUSY);
		return;
	}
	switch_out_with(sc, task, preempt, state, running);
	*(volatile __u64 *)&sc->busy = 0;
}

/*
 * The switch-out, twice: the loader attaches the one this kernel's sched_switch takes (its BTF
 * prototype, src/collector/switch-program.ts) and leaves the other unloaded. Both inline the
 * same account_switch_out, so each program's call chain is what it was with one.
 *
 * on_sched_switch: prev_state is the tracepoint's fourth argument since Linux 5.18 (commit
 * fa2c3254d7cf, "sched/tracing: Don't re-read p->state when emitting sched_switch event"): the
 * state __schedule() saw, which a concurrent wakeup cannot have changed since.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	AB_BEGIN();
	if (is_postmaster_family(prev))
		account_switch_out(prev, preempt, prev_state, false, SWITCH_FROM_SCHED);
	AB_END();
	return 0;
}

/* task_struct::state before Linux 5.14 (the libbpf-tools core_fixes.bpf.h flavour). */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/*
 * A task's state as the task holds it: task_struct::__state (unsigned int) since Linux 5.14,
 * commit 2f064a59a11f ("sched: Change task_struct::state"), `long state` before.
 */
static __always_inline unsigned int task_state(struct task_struct *task)
{
	if (bpf_core_field_exists(task->__state))
		return task->__state;
	return ((struct task_struct___pre514 *)task)->state;
}

/*
 * on_switch_3args: for kernels whose sched_switch has three arguments (preempt, prev, next:
 * before 5.18), the state read from prev itself, as sched_switch's users did before 5.18. It is
 * the state __schedule() saw but for a wakeup racing with this switch-out (another CPU's
 * try_to_wake_up may already have set TASK_WAKING, which still reads as a sleep; TASK_RUNNING
 * only once prev is off its CPU); a preemption is passed, as before. Valid on 5.18+ too (the
 * fourth argument is simply not read): tests run it there (test/integration/switch-fallback.test.ts).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch_3args, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	AB_BEGIN();
	if (is_postmaster_family(prev))
		account_switch_out(prev, preempt, task_state(prev), false, SWITCH_FROM_SCHED);
	AB_END();
	return 0;
}

/*
 * With on_sched_switch: a CPU-clock sample every 100 ms on each CPU accounts the backend
 * running there as if it had been preempted, so a long CPU-bound statement that never leaves
 * its CPU shows its time in bpf_stats while it runs (about 20 runs a second on 2 CPUs).
 */
SEC("perf_event")
int on_cpu_tick(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (is_postmaster_family(task))
		account_switch_out(task, true, TASK_RUNNING, true, SWITCH_FROM_TICK);
	return 0;
}

#endif /* CPU_BPF_H */
