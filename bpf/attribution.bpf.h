/* SPDX-License-Identifier: MIT */
/*
 * Attribution: which backend and which query (pg_stat_statements' key) a piece of kernel
 * time belongs to. Shared by every program of the collector.
 *
 * No uprobe is needed on the hot path. Postgres keeps the running query's id in its own
 * shared memory (MyBEEntry->st_query_id) and the current wait event in
 * *my_wait_event_info; postmaster children are forked without exec, so those globals sit at
 * the same address in every backend. At each context switch of a backend we read both with
 * bpf_probe_read_user (the switching task is `current`), and read the scheduler's own
 * cumulative counters from task_struct, so each switch costs a few loads instead of a trap.
 */
#ifndef ATTRIBUTION_BPF_H
#define ATTRIBUTION_BPF_H

#include "pgstats.h"

#define TASK_RUNNING 0x0000
#define TASK_DEAD    0x0080

/* Postgres wait event classes (utils/wait_event.h); stable since 9.6. */
#define PG_WAIT_CLASS_MASK 0xFF000000u
#define PG_WAIT_LWLOCK     0x01000000u
#define PG_WAIT_LOCK       0x03000000u
#define PG_WAIT_CLIENT     0x06000000u
#define PG_WAIT_IO         0x0A000000u

/* Written by the collector between open and load (src/attach/collector-config.ts). */
const volatile __u32 postmaster_tgid = 0;
const volatile __u64 my_be_entry_addr = 0;         /* &MyBEEntry, identical in every child */
const volatile __u64 my_wait_event_info_addr = 0;  /* &my_wait_event_info */
/* Offsets inside PgBackendStatus; calibrated against pg_stat_activity at start-up. */
const volatile __u32 status_procpid_off = 4;
const volatile __u32 status_backend_type_off = 8;
const volatile __u32 status_proc_start_off = 16;
const volatile __u32 status_dbid_off = 0;
const volatile __u32 status_userid_off = 0;
const volatile __u32 status_query_id_off = 0;
/* st_state and its STATE_IDLE value (idle in transaction: +2, aborted: +4); offset 0 = unknown. */
const volatile __u32 status_state_off = 0;
const volatile __u32 status_state_idle = 1;
/*
 * st_state and st_query_id in one user read (src/attach/status-span.ts): every user read costs
 * ~90 ns here whatever its size, and the state says "waiting for the client" (idle) without a
 * second read of the wait event, for the most common sleep of an OLTP backend. Length 0: the
 * fields are too far apart (or one is unknown), and st_query_id is read alone.
 */
#define STATUS_SPAN_MAX 256
const volatile __u32 status_span_off = 0;
const volatile __u32 status_span_len = 0;

/* Room for the span: too large for the BPF stack next to the rest of a switch's state. */
struct status_span {
	__u8 bytes[STATUS_SPAN_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct status_span);
} status_span_scratch SEC(".maps");
const volatile __u32 client_read_event = PG_WAIT_CLIENT;
/* st_backendType of a client backend in this version (calibrated): it always has a user and a database. */
const volatile __s32 client_backend_type = -1;
/*
 * Written by the collector right after load and whenever collection resumes after a pause
 * (src/attach/collector-object.ts): CLOCK_MONOTONIC when collection (re)started, so tasks
 * forked later are counted from their fork and older ones from their next switch; and the
 * epoch, so a record kept across a pause is re-baselined at its task's next switch instead of
 * charging the task's next interval with everything it did while nothing was attached.
 */
__u64 tracking_since_ns = 0;
__u32 tracking_epoch = 0;

/*
 * The maps every context switch touches are not preallocated. Preallocated, they made the
 * links cost pgbench -S ~1 us more CPU per transaction than the handler's own run time
 * (bench/cpu-by-process.ts; README, "Where the cost went"). Our reading, unconfirmed without a
 * PMU: a preallocated hash keeps its elements on scattered 4 KiB vmalloc pages, each one more
 * TLB entry to walk on a VM, while elements allocated on demand come from the linear map.
 * max_entries still bounds them (user space sets it before load); a failed allocation is
 * counted like a full map.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct backend_record);
} backends SEC(".maps");

/* Per-CPU so that many backends running the same query never contend on one value. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct query_key);
	__type(value, struct metrics);
} queries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} excluded_pids SEC(".maps");

/* Log2 latency histograms per (query, kind); see struct hist in pgstats.h. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct hist_key);
	__type(value, struct hist);
} histograms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static const struct backend_record empty_backend = {};
static const struct metrics empty_metrics = {};

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

static __always_inline void count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&counters, &index);

	if (value)
		__sync_fetch_and_add(value, 1);
}

static __always_inline bool is_postmaster_family(struct task_struct *task)
{
	return task->tgid == postmaster_tgid || task->real_parent->tgid == postmaster_tgid;
}

/* The task's counters as of `now`: its next interval starts here. */
static __always_inline void baseline(struct backend_record *r, struct task_struct *task, __u64 now, __u64 sum_exec)
{
	r->epoch = tracking_epoch;
	r->last_ts = now;
	r->last_sum_exec = sum_exec;
	r->last_run_delay = task->sched_info.run_delay;
	r->last_nvcsw = task->nvcsw;
	r->last_nivcsw = task->nivcsw;
	r->last_migrations = task->se.nr_migrations;
	r->last_minflt = task->min_flt;
	r->last_majflt = task->maj_flt;
}

/* Start tracking a task: counters count from now (or from fork, for tasks born after attach). */
static __always_inline struct backend_record *track(struct task_struct *task, __u32 pid, __u64 now)
{
	struct backend_record *r;

	if (bpf_map_update_elem(&backends, &pid, &empty_backend, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&backends, &pid)) {
		count(COUNTER_BACKENDS_FULL);
		return NULL;
	}
	r = bpf_map_lookup_elem(&backends, &pid);
	if (!r)
		return NULL;
	r->backend_type = -1;
	r->task_start_ns = task->start_time;
	baseline(r, task, now, task->se.sum_exec_runtime);
	r->sleep_key.toplevel = 1;
	if (bpf_map_lookup_elem(&excluded_pids, &pid))
		r->flags |= BACKEND_EXCLUDED;
	return r;
}

/*
 * Fill r's identity once the backend has published its PgBackendStatus. Until st_procpid
 * shows our pid the slot may still hold a previous backend's values, so it is not trusted.
 */
static __always_inline bool read_identity(struct backend_record *r, __u32 pid)
{
	__u64 status = 0, wait_ptr = 0, proc_start = 0;
	__u32 ids[2] = {};
	__s32 procpid = 0, backend_type = -1;

	if (bpf_probe_read_user(&status, sizeof(status), (void *)my_be_entry_addr)) {
		count(COUNTER_STATUS_UNREADABLE);
		return false;
	}
	if (!status)
		return false;
	if (bpf_probe_read_user(&procpid, sizeof(procpid), (void *)(status + status_procpid_off)) ||
	    procpid != (__s32)pid)
		return false;
	bpf_probe_read_user(&backend_type, sizeof(backend_type), (void *)(status + status_backend_type_off));
	bpf_probe_read_user(&proc_start, sizeof(proc_start), (void *)(status + status_proc_start_off));
	bpf_probe_read_user(&ids[0], sizeof(ids[0]), (void *)(status + status_dbid_off));
	bpf_probe_read_user(&ids[1], sizeof(ids[1]), (void *)(status + status_userid_off));
	/*
	 * PostgreSQL 18 publishes st_procpid before authentication and the database and user only
	 * after it (pgstat_bestart_initial / _final): until both are set, look again next time.
	 */
	if (backend_type == client_backend_type && (!ids[0] || !ids[1]))
		return false;
	bpf_probe_read_user(&wait_ptr, sizeof(wait_ptr), (void *)my_wait_event_info_addr);

	r->status_ptr = status;
	r->wait_event_ptr = wait_ptr;
	r->backend_type = backend_type;
	r->backend_start_us = proc_start;
	r->dbid = ids[0];
	r->userid = ids[1];
	r->flags |= BACKEND_IDENTITY_KNOWN;
	return true;
}

static __always_inline bool is_idle_state(__u32 state)
{
	return state == status_state_idle || state == status_state_idle + 2 || state == status_state_idle + 4;
}

/*
 * The query the backend is on now; false when it has none. With `wait_event` (a task going to
 * sleep), also why it sleeps: a backend pg_stat_activity shows idle waits for its client
 * whatever its wait event (ClientRead, or ClientWrite while ReadyForQuery goes out), so it gets
 * client_read_event without reading the wait event; a task in IO sleep needs none (the kernel's
 * iowait flag decides, see classify_sleep).
 */
static __always_inline bool read_current(struct task_struct *task, struct backend_record *r, __u32 pid,
					  struct query_key *key, __u32 *wait_event)
{
	__u64 queryid = 0;
	__u32 state = 0;
	bool state_known = false;

	/* An exiting process has released its memory: nothing to read, nothing wrong. */
	if (!task->mm)
		return false;

	if (!(r->flags & BACKEND_IDENTITY_KNOWN) && !read_identity(r, pid))
		return false;
	if (status_span_len && status_span_len <= STATUS_SPAN_MAX &&
	    status_query_id_off - status_span_off <= STATUS_SPAN_MAX - sizeof(queryid) &&
	    status_state_off - status_span_off <= STATUS_SPAN_MAX - sizeof(state)) {
		__u32 zero = 0;
		struct status_span *span = bpf_map_lookup_elem(&status_span_scratch, &zero);

		if (!span)
			return false;
		if (bpf_probe_read_user(span->bytes, status_span_len, (void *)(r->status_ptr + status_span_off))) {
			count(COUNTER_STATUS_UNREADABLE);
			return false;
		}
		__builtin_memcpy(&queryid, &span->bytes[status_query_id_off - status_span_off], sizeof(queryid));
		__builtin_memcpy(&state, &span->bytes[status_state_off - status_span_off], sizeof(state));
		state_known = true;
	} else if (status_query_id_off &&
		   bpf_probe_read_user(&queryid, sizeof(queryid), (void *)(r->status_ptr + status_query_id_off))) {
		/* Offset 0 means query ids are not computed here (compute_query_id = off). */
		count(COUNTER_STATUS_UNREADABLE);
		return false;
	}
	if (wait_event) {
		if (state_known && is_idle_state(state))
			*wait_event = client_read_event;
		else if (r->wait_event_ptr && !BPF_CORE_READ_BITFIELD(task, in_iowait))
			bpf_probe_read_user(wait_event, sizeof(*wait_event), (void *)r->wait_event_ptr);
	}
	key->queryid = queryid;
	key->userid = r->userid;
	key->dbid = r->dbid;
	key->toplevel = 1; /* st_query_id only ever holds the top-level statement's id */
	return true;
}

static __always_inline struct metrics *query_metrics(const struct query_key *key)
{
	struct metrics *m;

	if (!key->queryid)
		return NULL;
	m = bpf_map_lookup_elem(&queries, key);
	if (m)
		return m;
	if (bpf_map_update_elem(&queries, key, &empty_metrics, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&queries, key)) {
		count(COUNTER_QUERIES_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&queries, key);
}

/* The histogram slot of a duration: floor(log2(microseconds)), clamped to the last slot. */
static __always_inline __u32 hist_slot(__u64 ns)
{
	__u64 us = ns / 1000;
	__u32 slot = 0;

	if (us >> 32) { us >>= 32; slot += 32; }
	if (us >> 16) { us >>= 16; slot += 16; }
	if (us >> 8) { us >>= 8; slot += 8; }
	if (us >> 4) { us >>= 4; slot += 4; }
	if (us >> 2) { us >>= 2; slot += 2; }
	if (us >> 1) slot += 1;
	return slot < HIST_SLOTS ? slot : HIST_SLOTS - 1;
}

/* Counts one observation of `ns` in the query's histogram of `kind`. */
/* The query's histogram of `kind`, created empty on first use; NULL (counted) when the map is full. */
static __always_inline struct hist *hist_for(const struct query_key *q, __u32 kind)
{
	static const struct hist empty_hist = {};
	struct hist_key key = { .q = *q, .kind = kind };
	struct hist *h;

	if (!q->queryid)
		return NULL;
	h = bpf_map_lookup_elem(&histograms, &key);
	if (h)
		return h;
	if (bpf_map_update_elem(&histograms, &key, &empty_hist, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&histograms, &key)) {
		count(COUNTER_HISTOGRAMS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&histograms, &key);
}

/* Counts one observation of `ns` in the query's histogram of `kind`, and keeps its maximum. */
static __always_inline void hist_observe(const struct query_key *q, __u32 kind, __u64 ns)
{
	struct hist *h = hist_for(q, kind);

	if (!h)
		return;
	h->slots[hist_slot(ns) & (HIST_SLOTS - 1)]++;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

#include "latency.bpf.h"

static __always_inline void add_wait(struct metrics *m, __u32 sleep_class, __u64 ns)
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

struct slice {
	__u64 on_cpu_ns;
	__u64 runq_ns;
	__u64 nvcsw;
	__u64 nivcsw;
	__u64 migrations;
	__u64 minflt;
	__u64 majflt;
};

static __always_inline void add_slice(struct metrics *m, const struct slice *s)
{
	m->total_ns += s->on_cpu_ns + s->runq_ns;
	m->on_cpu_ns += s->on_cpu_ns;
	m->runq_ns += s->runq_ns;
	m->nvcsw += s->nvcsw;
	m->nivcsw += s->nivcsw;
	m->cpu_migrations += s->migrations;
	m->minflt += s->minflt;
	m->majflt += s->majflt;
}

static __always_inline __u32 classify_sleep(struct task_struct *task, bool preempt, unsigned int state,
					    __u32 wait_event)
{
	if (preempt || state == TASK_RUNNING || (state & TASK_DEAD))
		return SLEEP_NONE;
	if (BPF_CORE_READ_BITFIELD(task, in_iowait))
		return SLEEP_IO;
	switch (wait_event & PG_WAIT_CLASS_MASK) {
	case PG_WAIT_LOCK:
		return SLEEP_LOCK;
	case PG_WAIT_LWLOCK:
		return SLEEP_LWLOCK;
	case PG_WAIT_IO:
		return SLEEP_IO;
	case PG_WAIT_CLIENT:
		return wait_event == client_read_event ? SLEEP_CLIENT : SLEEP_OTHER;
	default:
		return SLEEP_OTHER;
	}
}

/*
 * Account everything since the task's previous switch-out, now that it leaves the CPU:
 *   [previous switch-out] sleep ... [woken] run-queue wait ... on CPU ... [now]
 * The sleep belongs to the query the backend was waiting in; the run-queue wait and the CPU
 * slice belong to the query it is on now. On-CPU and run-queue time come from the scheduler's
 * own accounting (se.sum_exec_runtime, sched_info.run_delay); the sleep is the rest.
 */
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
 * `running`: called for the task on this CPU from a periodic sample rather than a switch-out;
 * it is accounted as if preempted, so a statement that never leaves its CPU still shows its time.
 */
static __always_inline void account_switch_out(struct task_struct *task, bool preempt, unsigned int state,
					       bool running)
{
	__u32 pid = task->pid, wait_event = 0, next_class;
	__u64 running_sum_exec = 0;
	__u64 now = running ? running_time(task, &running_sum_exec) : switch_time(task);
	struct backend_record *r;
	struct query_key key = {};
	struct metrics *qm;
	struct slice s;
	__u64 sum_exec, run_delay, nvcsw, nivcsw, migrations, minflt, majflt, interval, sleep_ns;
	bool dead = state & TASK_DEAD, sleeping;

	r = bpf_map_lookup_elem(&backends, &pid);
	if (!r) {
		/* A sample never starts tracking: the task's next switch-out does. */
		if (dead || running)
			return;
		r = track(task, pid, now);
		if (!r)
			return;
		if (r->task_start_ns < tracking_since_ns)
			return; /* older than the collector: baseline taken, count from the next switch */
		/*
		 * Forked since: its counters started at zero at fork, so nothing is lost. A new task is
		 * runnable from fork to its first switch-out, so that interval has no sleep in it.
		 */
		r->last_ts = now - task->se.sum_exec_runtime - task->sched_info.run_delay;
		r->last_sum_exec = 0;
		r->last_run_delay = 0;
		r->last_nvcsw = 0;
		r->last_nivcsw = 0;
		r->last_migrations = 0;
		r->last_minflt = 0;
		r->last_majflt = 0;
	}
	if (r->flags & BACKEND_EXCLUDED)
		return;

	sum_exec = running ? running_sum_exec : task->se.sum_exec_runtime;
	/* Kept across a pause: what the task did meanwhile belongs to nobody (zero interval below). */
	if (r->epoch != tracking_epoch)
		baseline(r, task, now, sum_exec);
	run_delay = task->sched_info.run_delay;
	nvcsw = task->nvcsw;
	nivcsw = task->nivcsw;
	migrations = task->se.nr_migrations;
	minflt = task->min_flt;
	majflt = task->maj_flt;

	s.on_cpu_ns = sum_exec - r->last_sum_exec;
	s.runq_ns = run_delay - r->last_run_delay;
	s.nvcsw = nvcsw - r->last_nvcsw;
	s.nivcsw = nivcsw - r->last_nivcsw;
	s.migrations = migrations - r->last_migrations;
	s.minflt = minflt - r->last_minflt;
	s.majflt = majflt - r->last_majflt;
	interval = now - r->last_ts;
	sleep_ns = interval > s.on_cpu_ns + s.runq_ns ? interval - s.on_cpu_ns - s.runq_ns : 0;

	/*
	 * The wait event only classifies a sleep, so it is read only for a task going to sleep. An
	 * exiting task has already dropped its mm: its last known query stands.
	 */
	sleeping = !preempt && state != TASK_RUNNING && !dead;
	if (dead || !read_current(task, r, pid, &key, sleeping ? &wait_event : NULL)) {
		key = r->sleep_key;
		if (!dead)
			key.queryid = 0;
	}

	/* The sleep that ended this interval. */
	if (sleep_ns && r->sleep_class != SLEEP_CLIENT) {
		add_wait(&r->m, r->sleep_class, sleep_ns);
		qm = query_metrics(&r->sleep_key);
		if (qm)
			add_wait(qm, r->sleep_class, sleep_ns);
	}
	/* The run-queue wait and the CPU slice. */
	add_slice(&r->m, &s);
	qm = query_metrics(&key);
	if (qm)
		add_slice(qm, &s);

	next_class = classify_sleep(task, preempt, state, wait_event);
	r->last_ts = now;
	r->last_sum_exec = sum_exec;
	r->last_run_delay = run_delay;
	r->last_nvcsw = nvcsw;
	r->last_nivcsw = nivcsw;
	r->last_migrations = migrations;
	r->last_minflt = minflt;
	r->last_majflt = majflt;
	hist_on_switch_out(r, &key, s.runq_ns, next_class);
	r->sleep_class = next_class;
	r->sleep_key = key;
	if (key.queryid)
		r->queryid = key.queryid;
	if (dead)
		r->exited_ns = bpf_ktime_get_ns(); /* CLOCK_MONOTONIC, which user space turns into wall time */
}

#endif /* ATTRIBUTION_BPF_H */
