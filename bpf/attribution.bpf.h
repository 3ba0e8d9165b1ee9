/* SPDX-License-Identifier: MIT */
/*
 * Attribution: which backend and which query (pg_stat_statements' key) a figure belongs to.
 * The maps every family adds to (backends by pid, queries by key), the postmaster-family
 * filter, and the lookups the families share. Records are created by the cpu family only
 * (bpf/cpu.bpf.h, at a backend's first switch-out); the others add to them.
 */
#ifndef ATTRIBUTION_BPF_H
#define ATTRIBUTION_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "records.h"
#include "maps.bpf.h"
#include "pg-status.bpf.h"
#include "lock-waits.bpf.h"
#include "query-changes.bpf.h"

/*
 * The postmaster being watched as the kernel numbers it (its tgid in the initial pid
 * namespace), whatever pid namespace Postgres and the collector run in. A variable, not a
 * setting: the collector writes it after load, once it has found that number (in a container
 * only BPF can see it, CollectorObject.findTgid), before it attaches anything, and again when the
 * postmaster restarts (NO_POSTMASTER meanwhile), without reloading the object.
 */
enum postmaster_tgid_value {
	NO_POSTMASTER = 0xffffffff, /* no process has it (PID_MAX_LIMIT is 2^22): the filter matches nothing */
};
enum postmaster_tgid_value postmaster_tgid = 0;
/*
 * The level of the postmaster's pid namespace (0: the host's). A backend's pid as Postgres
 * knows it (st_procpid, pg_stat_activity.pid, the collector's own connections) is its pid at
 * that level; read once per process, when its record is made.
 */
enum pidns_level_bound {
	PIDNS_LEVEL_MAX = 32, /* MAX_PID_NS_LEVEL */
};
enum pidns_level_bound pidns_level = 0;

/*
 * Written by the collector right after load and whenever collection resumes after a pause
 * (src/collector/): CLOCK_MONOTONIC when collection (re)started, so tasks forked later are
 * counted from their fork and older ones from their next switch (bpf/cpu.bpf.h); and the epoch, so a record
 * kept across a pause is re-baselined at its task's next switch instead of charging the
 * task's next interval with everything it did while nothing was attached.
 */
__u64 tracking_since_ns = 0;
__u32 tracking_epoch = 0;

/*
 * The maps every context switch touches are not preallocated. Preallocated, they made the
 * links cost pgbench -S ~1 us more CPU per transaction than the handler's own run time
 * (bench/cpu-by-process.ts; bench/journal/preallocated-maps.md#preallocated-hash-maps-were-for-the-links). Our reading, unconfirmed without a
 * PMU: a preallocated hash keeps its elements on scattered 4 KiB vmalloc pages, each one more
 * TLB entry to walk on a VM, while elements allocated on demand come from the linear map.
 * max_entries still bounds them (user space sets it before load); a failed allocation is
 * counted apart from a full map (count_refusal, bpf/maps.bpf.h).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct backend_record);
} backends SEC(".maps");

/*
 * Records of processes that have exited, waiting for the collector to write their final figures
 * and delete them (src/flush/metric-rows.ts). Moved out of `backends` at the exit, so that the
 * pid is free at once: pids wrap (pid_max is 32768 on many hosts, a connection storm goes round
 * in minutes), and a record left under its pid until the next written flush was taken over by
 * the next process given that pid, which then counted its statements in the dead process's row.
 * Keyed by pid and start time: the next process given the pid, exiting before a flush could
 * write the first one (a slow flush under churn), retires beside it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct exited_key);
	__type(value, struct backend_record);
} exited_backends SEC(".maps");

/* Per-CPU so that many backends running the same query never contend on one value. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct query_key);
	__type(value, struct query_value);
} queries SEC(".maps");

/*
 * The collector's own connections, by their pid as Postgres knows it (pg_pid): their records are
 * marked BACKEND_EXCLUDED. An entry lives as long as its backend: the final switch of an excluded
 * backend deletes it (bpf/cpu.bpf.h), and the collector deletes entries of pids that are gone
 * without one (src/collector/). User space may set max_entries before load (tests shrink it to
 * prove it never fills).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} excluded_pids SEC(".maps");

/* Room to read a backend's identity when it has no record yet (see memio_backend). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct backend_record);
} memio_scratch SEC(".maps");

/* The postmaster and its children (backends, background workers, auxiliary processes). */
static __always_inline bool is_postmaster_family(struct task_struct *task)
{
	return task->tgid == postmaster_tgid || task->real_parent->tgid == postmaster_tgid;
}

/*
 * The pid Postgres knows `task` by: its pid in the postmaster's pid namespace (struct pid keeps
 * one struct upid per level). Postgres processes are single-threaded: the thread's pid is the
 * process's. 0 when it cannot be read.
 */
static __always_inline __u32 pg_pid_of(struct task_struct *task)
{
	__u32 level = pidns_level, nr = 0;
	struct pid *pid;

	if (!level)
		return BPF_CORE_READ(task, pid);
	if (level > PIDNS_LEVEL_MAX)
		return 0;
	pid = BPF_CORE_READ(task, thread_pid);
	if (bpf_probe_read_kernel(&nr, sizeof(nr),
				  (void *)pid + bpf_core_field_offset(struct pid, numbers) +
					  level * bpf_core_type_size(struct upid) +
					  bpf_core_field_offset(struct upid, nr)))
		return 0;
	return nr;
}

/*
 * The id of the memory cgroup `task` is in (the kernfs inode of its directory, as user space
 * sees it in the memory hierarchy: cgroup v1's memory controller, or cgroup v2). A container's
 * memory limit is set there, so reclaim can be summed per container. 0 when unreadable.
 */
static __always_inline __u64 memory_cgroup_of(struct task_struct *task)
{
	int memory = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	struct cgroup_subsys_state *css;

	if (memory < 0 || memory >= bpf_core_enum_value(enum cgroup_subsys_id, CGROUP_SUBSYS_COUNT))
		return 0;
	css = BPF_CORE_READ(task, cgroups, subsys[memory]);
	if (!css)
		return 0;
	return BPF_CORE_READ(css, cgroup, kn, id);
}

/*
 * `r`, the record of the process `pid` that just exited, goes to exited_backends. If that map is
 * full it stays in `backends` (counted): written all the same, and a new process given the pid
 * before the next flush is not tracked until then (its start time is not the record's).
 */
static __always_inline void retire_backend(struct backend_record *r, __u32 pid)
{
	struct exited_key key = { .pid = pid, .task_start_ns = r->task_start_ns };

	if (bpf_map_update_elem(&exited_backends, &key, r, BPF_NOEXIST)) {
		count(COUNTER_EXITED_FULL);
		return;
	}
	bpf_map_delete_elem(&backends, &pid);
	note_change();
}

/*
 * The record under `pid` if it is `task`'s own. Records are keyed by pid, and one can outlive
 * its process unseen: a backend orphaned by a postmaster kill is no longer the postmaster's
 * child, so BPF never sees its last switch (nor one that exits while collection is paused).
 * Under a connection storm the pid comes round again in minutes, and the newcomer must not
 * take over that record (its status pointer and identity are the dead process's).
 */
static __always_inline struct backend_record *task_record(struct task_struct *task, __u32 pid)
{
	struct backend_record *r = bpf_map_lookup_elem(&backends, &pid);

	if (r && r->task_start_ns != task->start_time)
		return NULL;
	return r;
}

/*
 * The record of the process `pid` that started at `task_start_ns`, live or exited and not yet
 * written: for a figure that arrives later in another context (a block request's completion),
 * by which time the process may have exited and its pid been given to another.
 */
static __always_inline struct backend_record *record_of(__u32 pid, __u64 task_start_ns)
{
	struct exited_key key = { .pid = pid, .task_start_ns = task_start_ns };
	struct backend_record *r = bpf_map_lookup_elem(&backends, &pid);

	if (r && r->task_start_ns == task_start_ns)
		return r;
	return bpf_map_lookup_elem(&exited_backends, &key);
}

/* The current task's record when it has one and is not one of the collector's own connections. */
static __always_inline struct backend_record *reported_backend(__u32 pid)
{
	struct backend_record *r = task_record(bpf_get_current_task_btf(), pid);

	if (!r || (r->flags & BACKEND_EXCLUDED))
		return NULL;
	return r;
}

/*
 * A role's share of the queries map, so that one role flooding distinct statements cannot keep
 * the others' new statements out: query keys a role added (here, atomically) minus those the
 * collector evicted (written by user space only, src/flush/metric-rows.ts) may not reach
 * max_query_keys_per_role (0: no limit; user space sets half of the map) -- while the map holds
 * query_keys_guard_fill keys or more (user space: 7/8 of it). Below that nobody is refused: the
 * map is sized from pg_stat_statements.max with headroom (src/collector/query-capacity.ts), so
 * the only role a typical application has, running as many distinct statements as
 * pg_stat_statements keeps, never reaches it, while a flooding role is stopped with 1/8 of the
 * map still free for the others. Touched only when a key is added, never on the lookup that
 * finds one.
 */
const volatile __u32 max_query_keys_per_role = 0;
const volatile __u32 query_keys_guard_fill = 0;

/*
 * Keys added to the queries map since load (here, atomically, once the insert succeeded) and
 * keys the collector evicted (written by user space after each eviction): their difference is
 * the map's fill, which BPF cannot ask the kernel for cheaply.
 */
__u64 query_keys_added = 0;
__u64 query_keys_evicted = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* userid */
	__type(value, __u64);
} role_added SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* userid */
	__type(value, __u64);
} role_evicted SEC(".maps");

/*
 * Figures of a key the queries map refused at once, one slot per task (the kernel's pid of the
 * task that hit the refusal): a backend is on one statement at a time, so one slot holds what
 * its current statement does until the collector's next flush takes the slot
 * (BPF_MAP_LOOKUP_AND_DELETE_ELEM) and writes it under its key. A second refused key while the
 * slot holds another is dropped and counted as before. Sized like backends by user space.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct query_overflow);
} query_overflow SEC(".maps");

/* The metrics of a query, created empty on first use; NULL without a query id, when the map is full or the role is at its share (counted). */
static const struct query_value empty_query_value = {};
static const struct query_overflow empty_overflow = {};
static const __u64 zero_count = 0;

/* Keys in the queries map now (see query_keys_added). */
static __always_inline __u64 query_keys_held(void)
{
	__u64 added = *(volatile __u64 *)&query_keys_added, evicted = *(volatile __u64 *)&query_keys_evicted;

	/* A key evicted between its insert and the increment: never a wrap to a huge fill. */
	return added > evicted ? added - evicted : 0;
}

/*
 * `key` was refused for `reason`: its figures go to the slot of the task `pid` whose figures they
 * are (0: the current task; a block IO completion runs in whatever task it interrupted, and names
 * the request's owner) when the slot is free or already holds that key (*held set, counted as
 * query_key_held), else nowhere (counted as `reason`). The collector may take a new slot before
 * its key is written (it skips one without a key, src/collector/map-readers.ts): the addition
 * that made it is then lost, as one made during an eviction's read is.
 */
static __always_inline struct metrics *hold_refused(const struct query_key *key, enum counter_index reason, bool *held,
						    __u32 pid)
{
	struct query_overflow *o;

	if (!pid)
		pid = (__u32)bpf_get_current_pid_tgid();
	o = bpf_map_lookup_elem(&query_overflow, &pid);
	if (!o) {
		if (bpf_map_update_elem(&query_overflow, &pid, &empty_overflow, BPF_NOEXIST) ||
		    !(o = bpf_map_lookup_elem(&query_overflow, &pid))) {
			count(reason);
			return NULL;
		}
		o->key = *key;
	} else if (o->key.queryid != key->queryid || o->key.userid != key->userid || o->key.dbid != key->dbid ||
		   o->key.toplevel != key->toplevel) {
		count(reason);
		return NULL;
	}
	count(COUNTER_QUERY_KEY_HELD);
	*held = true;
	return &o->m;
}

/*
 * The figures of `key`, added (empty) if the map and the role's share have room, else the
 * current task's overflow slot (*held) when it can take them. Every key goes in through here,
 * whatever its query id: the collector counts each key it evicts against its role, so a key
 * added past role_added would leave the role owing keys it never had.
 */
static __always_inline struct metrics *query_key_entry(const struct query_key *key, bool *held, __u32 pid)
{
	struct metrics *m;
	__u64 *added, *evicted;
	long err;

	m = bpf_map_lookup_elem(&queries, key);
	if (m)
		return m;
	added = NULL;
	if (max_query_keys_per_role) {
		added = map_lookup_or_init(&role_added, &key->userid, &zero_count, COUNTER_ROLE_QUOTA_UNTRACKED);
		evicted = bpf_map_lookup_elem(&role_evicted, &key->userid);
		/* More evicted than added (keys added while role_added was full): no debt, never a refusal for good. */
		if (added && *added > (evicted ? *evicted : 0) &&
		    *added - (evicted ? *evicted : 0) >= max_query_keys_per_role &&
		    query_keys_held() >= query_keys_guard_fill)
			return hold_refused(key, COUNTER_ROLE_QUOTA, held, pid);
	}
	err = bpf_map_update_elem(&queries, key, &empty_query_value, BPF_NOEXIST);
	if (err) {
		m = bpf_map_lookup_elem(&queries, key); /* another CPU added it first */
		if (m)
			return m;
		return hold_refused(key, err == -E2BIG ? COUNTER_QUERIES_FULL : COUNTER_MAP_NO_MEMORY, held, pid);
	}
	__sync_fetch_and_add(&query_keys_added, 1);
	if (added)
		__sync_fetch_and_add(added, 1);
	return bpf_map_lookup_elem(&queries, key);
}

/*
 * The figures of `key` for the caller to add to (see query_key_entry): a change of the queries
 * map, or of an overflow slot (not a key of the queries map: not noted as one). With `value`,
 * also the queries map's entry they are in (*value, NULL for an overflow slot's).
 */
static __always_inline struct metrics *query_key_metrics_of(const struct query_key *key, __u32 pid,
							    struct query_value **value)
{
	bool held = false;
	struct metrics *m = query_key_entry(key, &held, pid);

	if (m) {
		note_change();
		if (!held)
			note_query_change(key, m);
	}
	if (value)
		*value = m && !held ? (struct query_value *)m : NULL; /* m is the entry's first member */
	return m;
}

/* The same, for the current task's figures. */
static __always_inline struct metrics *query_key_metrics(const struct query_key *key)
{
	return query_key_metrics_of(key, 0, NULL);
}

/* When the current statement started (st_activity_start_timestamp); 0 when unknown. */
static __always_inline __u64 statement_start_us(const struct backend_record *r)
{
	__u64 us = 0;

	if (status_activity_start_off && r->status_ptr)
		bpf_probe_read_user(&us, sizeof(us), (void *)(r->status_ptr + status_activity_start_off));
	return us;
}

/*
 * The runs refused by a client backend, for its parallel workers: a worker reports its leader's
 * query id and statement start (SetParallelStartTimestamps gives it the leader's statement
 * timestamp, which pgstat_report_activity stores), but not its leader, so it finds the leader's
 * mark here. Without this a refused statement's workers put their part on its key once room
 * appeared: a row without its call. Bounded by LRU: a statement's run is marked for as long as
 * it may have workers, and refusals are rare (a full map).
 */
struct refused_run {
	struct query_key key;
	__u64 start_us;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct refused_run);
	__type(value, __u8);
} refused_runs SEC(".maps");

/* Set once a run is put in refused_runs: until then, workers do not look there. */
__u64 refused_runs_added = 0;

static __always_inline void mark_refused(struct backend_record *r, const struct query_key *key, __u64 start_us)
{
	r->refused_queryid = key->queryid;
	r->refused_userid = key->userid;
	r->refused_start_us = start_us;
}

/* The record's refused-statement mark names `key` (whichever run of it). */
static __always_inline bool marked_refused(const struct backend_record *r, const struct query_key *key)
{
	return r->refused_queryid == key->queryid && r->refused_userid == key->userid;
}

/*
 * A statement refused once stays refused. When the queries map refuses a part of a top-level
 * statement (no room for its key, the slot holding another: counted once), the rest of that
 * statement from the same backend is dropped too, even if room appears meanwhile (a flush took
 * the slot or evicted keys). Without this, a statement whose call was refused got the slice that
 * follows its end under its key: a row with time and no call.
 *
 * The rest lasts until the backend's next statement begins, which sets a new
 * st_activity_start_timestamp (Parse, Bind and Execute each; a Sync, going idle and a wake-up
 * while idle keep it). So the slices of a backend woken while idle after a refused statement (a
 * signal, its Terminate) are dropped too, while its st_query_id still names that statement;
 * clearing the mark at the idle ClientRead put them on the key. A start that cannot be read (an
 * exiting task has dropped its memory) counts as the same statement. Without the start's offset,
 * the mark ends at the next idle wait for the client (account_switch_out).
 */
static __always_inline bool statement_refused(struct backend_record *r, const struct query_key *key)
{
	struct refused_run run = {};
	__u64 start;

	if (!r || !key->queryid)
		return false;
	if (marked_refused(r, key)) {
		if (!r->refused_start_us)
			return true;
		start = statement_start_us(r);
		if (!start || start == r->refused_start_us)
			return true;
		r->refused_queryid = 0; /* a new run of the same statement: counted again */
	}
	/* Another process's run of a statement (a parallel worker's leader's)? Only once any was refused. */
	if (r->backend_type == client_backend_type || !*(volatile __u64 *)&refused_runs_added)
		return false;
	run.key = *key;
	run.start_us = statement_start_us(r);
	if (!run.start_us || !bpf_map_lookup_elem(&refused_runs, &run))
		return false;
	mark_refused(r, key, run.start_us); /* its IO completions see it (query_metrics_of) */
	return true;
}

/* `key`'s statement of backend `r` lost a part: mark it (queryid 0 is no statement), and the run for its workers. */
static __always_inline void refuse_statement(struct backend_record *r, const struct query_key *key)
{
	struct refused_run run = {};
	__u8 one = 1;

	if (!r || !key->queryid)
		return;
	mark_refused(r, key, statement_start_us(r));
	if (r->backend_type != client_backend_type || !r->refused_start_us)
		return;
	run.key = *key;
	run.start_us = r->refused_start_us;
	if (!bpf_map_update_elem(&refused_runs, &run, &one, BPF_ANY) && !refused_runs_added)
		refused_runs_added = 1;
}

/*
 * A statement's figures that the task `pid` (kernel pid) of record `r` caused, charged from
 * another context (a block IO completion). A statement marked refused gets none: its start
 * cannot be read from here, so the mark is taken as it stands (the owner's next switch-out
 * ends it once a new statement has begun). A refusal here does not mark: nor can the start.
 */
static __always_inline struct metrics *query_metrics_of(const struct backend_record *r, const struct query_key *key,
							__u32 pid)
{
	if (!key->queryid || (r && marked_refused(r, key)))
		return NULL;
	return query_key_metrics_of(key, pid, NULL);
}

/* A top-level statement's figures from its backend `r` (NULL: none at hand); none for queryid 0 (no statement yet, or compute_query_id off). */
static __always_inline struct metrics *statement_metrics(struct backend_record *r, const struct query_key *key)
{
	struct metrics *m;

	if (!key->queryid || statement_refused(r, key))
		return NULL;
	m = query_key_metrics(key);
	if (!m)
		refuse_statement(r, key);
	return m;
}

/*
 * Figures a client backend's statement gathers before it has a query id. Postgres resets
 * st_query_id when a statement starts (STATE_RUNNING) and sets it after parse analysis, so
 * parsing, analysis and the relation locks analysis waits for (a SELECT queued behind LOCK
 * TABLE or ALTER TABLE) come before it. The cpu family holds such time in the backend record
 * (r->held) and charges it here, once it sees the statement with its id, or ended (idle)
 * without one: an error in parse analysis, a statement without an id. Those stay, visibly,
 * under queryid 0 of the backend's user and database.
 */
static __always_inline bool holds_before_query_id(const struct backend_record *r, const struct query_key *key,
						  __u32 state)
{
	return !key->queryid && is_running_state(state) && r->backend_type == client_backend_type;
}

/* How many bytes of a statement's text tell it from the next one (statement_fingerprint). */
#define STATEMENT_TEXT_PREFIX 64

/*
 * Which statement the backend is on, as a hash of the first bytes of its text (st_activity_raw,
 * the buffer pg_stat_activity.query is read from, bytes after the text included); 0 when
 * unknown. Not the statement start: the extended protocol reports one statement three times
 * (Parse, Bind, Execute), each with a new start, so a lock wait in Parse's analysis went to
 * queryid 0. Not while the backend writes its status (odd change count): pgstat_report_activity()
 * sets st_state and clears st_query_id of a new statement before it copies the text, so a backend
 * switched out in between (preempted, sampled, stopped) shows the previous statement's text.
 * The backend is off the CPU, interrupted, or in its own probe while BPF reads it: it writes
 * nothing between the reads. Two statements whose texts share the first 64 bytes look alike.
 */
static __noinline __u64 statement_fingerprint(const struct backend_record *r)
{
	__u64 words[STATEMENT_TEXT_PREFIX / 8] = {}, text = 0, hash = 0xcbf29ce484222325ULL; /* FNV-1a's basis */
	__s32 changecount;
	int i;

	if (!r || !status_activity_raw_off || !r->status_ptr || !status_changecount(r->status_ptr, &changecount))
		return 0;
	if (bpf_probe_read_user(&text, sizeof(text), (void *)(r->status_ptr + status_activity_raw_off)) || !text ||
	    bpf_probe_read_user(words, sizeof(words), (void *)text))
		return 0;
	for (i = 0; i < STATEMENT_TEXT_PREFIX / 8; i++)
		hash = (hash ^ words[i]) * 0x100000001b3ULL; /* FNV's 64-bit prime, a word at a time */
	return hash | 1;
}

/*
 * Called on each switch-out that holds: remembers which statement the held figures are of,
 * looking again while that was unknown (a switch-out inside the status write).
 */
static __always_inline void start_holding(struct backend_record *r)
{
	if (!(r->flags & BACKEND_HOLDING)) {
		r->held_statement = statement_fingerprint(r);
		r->flags |= BACKEND_HOLDING;
	} else if (!r->held_statement) {
		r->held_statement = statement_fingerprint(r);
	}
}

/*
 * `key` is what the backend is on now: the held statement with its id, or idle after it (its
 * id, or 0 when it never got one). A backend that went from the held statement straight into
 * the next one without a switch-out in between (pipelined statements) shows the next
 * statement's id: its text says so, and the held figures go to queryid 0.
 *
 * A global function, verified once per program (see query_add_wait in bpf/cpu.bpf.h).
 */
__noinline int release_held(struct backend_record *r, const struct query_key *key)
{
	struct query_key k;
	struct metrics *qm, *h;

	if (!r || !key)
		return 0;
	k = *key;
	h = &r->held;
	if (k.queryid && r->held_statement) {
		__u64 now = statement_fingerprint(r);

		if (now && now != r->held_statement)
			k.queryid = 0;
	}
	if (r->flags & BACKEND_HOLDING_LOCK_WAIT) {
		struct held_lock_wait *l = &r->held_lock;
		struct lock_wait_key lk = {
			.q = k,
			.locktag_type = l->locktag_type,
			.mode = l->mode,
			.database = l->database,
			.relation = l->relation,
		};

		add_totals(&lock_waits, &lk, l->waits, l->wait_ns, COUNTER_LOCK_WAITS_FULL);
		__builtin_memset(l, 0, sizeof(*l));
		r->flags &= ~BACKEND_HOLDING_LOCK_WAIT;
	}
	if (!(r->flags & BACKEND_HOLDING))
		return 0;
	/* queryid 0 too: a statement that ended without one */
	qm = statement_refused(r, &k) ? NULL : query_key_metrics(&k);
	if (!qm)
		refuse_statement(r, &k);
	if (qm) {
		qm->total_ns += h->total_ns;
		qm->on_cpu_ns += h->on_cpu_ns;
		qm->runq_ns += h->runq_ns;
		qm->io_wait_ns += h->io_wait_ns;
		qm->lock_wait_ns += h->lock_wait_ns;
		qm->lwlock_wait_ns += h->lwlock_wait_ns;
		qm->other_wait_ns += h->other_wait_ns;
#define ADD_HELD_COUNTER(name, task_field) qm->name += h->name;
		SCHED_COUNTERS(ADD_HELD_COUNTER)
#undef ADD_HELD_COUNTER
	}
	__builtin_memset(h, 0, sizeof(*h));
	r->flags &= ~BACKEND_HOLDING;
	return 1;
}

/*
 * A heavyweight lock wait (the locks set) that ended before the statement had its id: held in
 * the record for release_held. A statement that waits for a second, different lock before its
 * id (a join of two locked tables) keeps that one under queryid 0: one slot per backend.
 */
static __always_inline void hold_lock_wait(struct backend_record *r, const struct lock_wait_key *key, __u64 ns)
{
	struct held_lock_wait *l = &r->held_lock;

	if ((r->flags & BACKEND_HOLDING_LOCK_WAIT) && (l->locktag_type != key->locktag_type || l->mode != key->mode ||
						       l->database != key->database || l->relation != key->relation)) {
		add_totals(&lock_waits, key, 1, ns, COUNTER_LOCK_WAITS_FULL);
		return;
	}
	if (!(r->flags & (BACKEND_HOLDING | BACKEND_HOLDING_LOCK_WAIT)))
		r->held_statement = statement_fingerprint(r);
	l->locktag_type = key->locktag_type;
	l->mode = key->mode;
	l->database = key->database;
	l->relation = key->relation;
	l->waits++;
	l->wait_ns += ns;
	r->flags |= BACKEND_HOLDING_LOCK_WAIT;
}

/*
 * Who `current` (a postmaster child) is, for a family that runs outside the sched_switch path
 * (memory, io): its query key, and its backend record to add to. Returns false when the figure
 * belongs to no one we report (an excluded connection). The key's queryid is 0 when the
 * backend is between queries (the figure then counts per backend only). *rp is NULL for a
 * backend with no record yet: one that has not left the CPU since we attached (a process
 * asleep at attach time that just woke up). Its identity is then read into a scratch record,
 * so the query still gets the figure; only its backend row misses it.
 */
static __always_inline bool memio_backend(struct task_struct *task, __u32 pid, struct backend_record **rp,
					  struct query_key *key)
{
	struct backend_record *r = task_record(task, pid);
	__u32 zero = 0;

	*rp = r;
	if (!r) {
		__u32 pg_pid = pg_pid_of(task);

		if (bpf_map_lookup_elem(&excluded_pids, &pg_pid))
			return false;
		r = bpf_map_lookup_elem(&memio_scratch, &zero);
		if (!r)
			return false;
		r->flags = 0;
		r->pg_pid = pg_pid;
		count(COUNTER_MEMIO_UNTRACKED);
	} else if (r->flags & BACKEND_EXCLUDED) {
		return false;
	}
	if (!read_current(task, r, pid, key, NULL))
		key->queryid = 0;
	return true;
}

#endif /* ATTRIBUTION_BPF_H */
