/* SPDX-License-Identifier: MIT */
/*
 * Reading a backend's PgBackendStatus (its pg_stat_activity row) from BPF.
 *
 * No uprobe is needed for it. Postgres keeps the running query's id in its own shared memory
 * (MyBEEntry->st_query_id) and the current wait event in *my_wait_event_info; postmaster
 * children are forked without exec, so those globals sit at the same address in every
 * backend. A program running in a backend's context (`current`) reads them with
 * bpf_probe_read_user: a few loads instead of a trap.
 *
 * The addresses and offsets are written by the collector between open and load
 * (src/collector/), the offsets calibrated against pg_stat_activity at start-up
 * (src/postmaster/).
 */
#ifndef PG_STATUS_BPF_H
#define PG_STATUS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "records.h"
#include "maps.bpf.h"
#include "part-timing.bpf.h"

/* Postgres wait event classes (utils/wait_event.h); stable since 9.6. */
#define PG_WAIT_CLASS_MASK 0xFF000000u
#define PG_WAIT_LWLOCK     0x01000000u
#define PG_WAIT_LOCK       0x03000000u
#define PG_WAIT_CLIENT     0x06000000u
#define PG_WAIT_IO         0x0A000000u

/*
 * &MyBEEntry and &my_wait_event_info, identical in every child of one postmaster. Variables, not
 * settings: a restarted postmaster maps the binary elsewhere (ASLR), and the collector follows
 * it without reloading (src/sidecar/postmaster-follower.ts). Read once per backend (read_identity).
 */
__u64 my_be_entry_addr = 0;
__u64 my_wait_event_info_addr = 0;
/*
 * &OuterUserId and &CurrentUserId (static in miscinit.c, found through their exported accessors,
 * src/postmaster/user-id-globals.ts), in the same way identical in every child; 0: not found, and a
 * statement is keyed by the session's user (st_userid). pg_stat_statements keys a statement by
 * GetUserId() at its end: the role after SET ROLE or SET SESSION AUTHORIZATION, which is
 * OuterUserId at the top level; CurrentUserId differs from it only inside SECURITY DEFINER
 * functions and maintenance commands run as a table's owner, where a nested statement runs.
 */
__u64 outer_user_id_addr = 0;
__u64 current_user_id_addr = 0;
/* &ActivePortal (pquery.c, exported), read where a statement ends (bpf/query.bpf.h); 0: not found. */
__u64 active_portal_addr = 0;
/* Offsets inside PgBackendStatus. */
const volatile __u32 status_procpid_off = 4;
const volatile __u32 status_backend_type_off = 8;
const volatile __u32 status_proc_start_off = 16;
const volatile __u32 status_dbid_off = 0;
const volatile __u32 status_userid_off = 0;
const volatile __u32 status_query_id_off = 0;
/* st_state and its STATE_IDLE value (idle in transaction: +2, aborted: +4); offset 0 = unknown. */
const volatile __u32 status_state_off = 0;
const volatile __u32 status_state_idle = 1;
/* st_activity_start_timestamp (st_state_start_timestamp follows); 0 = unknown. Read by bpf/latency.bpf.h. */
const volatile __u32 status_activity_start_off = 0;
/* st_activity_raw, the pointer to the statement's text; 0 = unknown. Read by bpf/attribution.bpf.h. */
const volatile __u32 status_activity_raw_off = 0;
/* 1 when st_xact_start_timestamp directly precedes st_activity_start_timestamp. */
const volatile __u32 status_xact_start_before = 0;
/*
 * st_state and st_query_id in one user read: every user read costs ~90 ns here whatever its
 * size, and the state says "waiting for the client" (idle) without a second read of the wait
 * event, for the most common sleep of an OLTP backend. Length 0: the fields are too far apart
 * (or one is unknown), and st_query_id is read alone.
 */
enum status_span_bound {
	STATUS_SPAN_MAX = 256, /* the longest span read in one go; longer: status_span_len is 0 */
};
const volatile __u32 status_span_off = 0;
const volatile enum status_span_bound status_span_len = 0; /* 0 .. STATUS_SPAN_MAX */

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

/* The wait event of a backend waiting for its client's next message (ClientRead). */
const volatile __u32 client_read_event = PG_WAIT_CLIENT;
/* st_backendType of a client backend in this version (calibrated): it always has a user and a database. */
const volatile __s32 client_backend_type = -1;

/*
 * st_changecount, PgBackendStatus' first member in every version: odd while the backend
 * writes its entry (PGSTAT_BEGIN_WRITE_ACTIVITY), so a read between two equal even values
 * saw no write in progress, as pgstat_read_current_status() requires of its readers.
 */
static __always_inline bool status_changecount(__u64 status, __s32 *count)
{
	return !bpf_probe_read_user(count, sizeof(*count), (void *)status) && !(*count & 1);
}

/*
 * Fill r's identity once the backend has published its PgBackendStatus. Until st_procpid
 * shows its pid (as Postgres knows it, r->pg_pid) the slot may still hold a previous
 * backend's values, so it is not trusted. pgstat_bestart() copies the whole entry while the
 * change count is odd: a backend preempted in that copy (a connection storm on busy CPUs)
 * shows its new pid with the previous occupant's user and database, and its statements would
 * be keyed under that role for good. So such a read is not trusted: it is retried later.
 */
static __always_inline bool read_identity(struct backend_record *r)
{
	__u64 status = 0, wait_ptr = 0, proc_start = 0;
	__u32 ids[2] = {};
	__s32 procpid = 0, backend_type = -1, before = 0, after = 0;

	if (bpf_probe_read_user(&status, sizeof(status), (void *)my_be_entry_addr)) {
		count(COUNTER_STATUS_UNREADABLE);
		return false;
	}
	if (!status || !status_changecount(status, &before))
		return false;
	if (bpf_probe_read_user(&procpid, sizeof(procpid), (void *)(status + status_procpid_off)) || !procpid ||
	    procpid != (__s32)r->pg_pid)
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
	if (!status_changecount(status, &after) || after != before)
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

/* st_state is idle, idle in transaction or idle in transaction (aborted). */
static __always_inline bool is_idle_state(__u32 state)
{
	return state == status_state_idle || state == status_state_idle + 2 || state == status_state_idle + 4;
}

/*
 * A process that has a query id runs in a database, so its PgBackendStatus names one. Zero
 * there means its identity was read too early: PostgreSQL 18 publishes st_procpid before the
 * database and user (pgstat_bestart_initial / _final) for every process, and a parallel worker
 * or other background worker is not held back by read_identity's client-backend check. Read
 * the two again, once the process has a query id; until they are set its figures stay with
 * the backend. Without this a parallel worker first seen in that window keyed its whole
 * query's work under userid 0 / dbid 0, apart from its leader's.
 */
static __always_inline bool identity_complete(struct backend_record *r)
{
	__u32 ids[2] = {};
	__s32 before = 0, after = 0;

	if (r->dbid)
		return true;
	if (!status_changecount(r->status_ptr, &before))
		return false;
	bpf_probe_read_user(&ids[0], sizeof(ids[0]), (void *)(r->status_ptr + status_dbid_off));
	bpf_probe_read_user(&ids[1], sizeof(ids[1]), (void *)(r->status_ptr + status_userid_off));
	if (!ids[0] || !status_changecount(r->status_ptr, &after) || after != before)
		return false;
	r->dbid = ids[0];
	r->userid = ids[1];
	return true;
}

/* st_state of a backend running a statement (STATE_RUNNING follows STATE_IDLE in every version). */
static __always_inline bool is_running_state(__u32 state)
{
	return state == status_state_idle + 1;
}

/*
 * The user a backend's statement runs as: OuterUserId, read again only when the statement id
 * differs from the one it was last read with (pgbench -S shows the same id at every switch-out:
 * no read), so a transaction that never changes its statement pays nothing. A role changes only
 * in a statement (SET ROLE, SET LOCAL ROLE, SET SESSION AUTHORIZATION, RESET, the COMMIT of a SET
 * LOCAL), and the statements around it have other ids. Left to the next new id: the slices of the
 * SET ROLE statement itself seen after a switch-out inside it (the query set reads the user again
 * at every statement end, so calls are keyed right). Processes without a user in their status
 * (auxiliary processes, autovacuum) keep 0, as pg_stat_activity shows them.
 */
static __always_inline __u32 statement_user(struct backend_record *r, __u64 queryid)
{
	__u32 user = 0;

	if (!outer_user_id_addr || !r->userid)
		return r->userid;
	if (r->run_userid && r->run_user_queryid == queryid)
		return r->run_userid;
	if (bpf_probe_read_user(&user, sizeof(user), (void *)outer_user_id_addr) || !user)
		return r->userid;
	r->run_userid = user;
	r->run_user_queryid = queryid;
	return user;
}

/*
 * The query the backend is on now; false when it has none. With `wait_event` (a task going to
 * sleep), also why it sleeps: a backend pg_stat_activity shows idle waits for its client
 * whatever its wait event (ClientRead, or ClientWrite while ReadyForQuery goes out), so it gets
 * client_read_event without reading the wait event. A task in IO sleep in a statement is classed
 * by the kernel's iowait flag (classify_sleep in bpf/cpu.bpf.h), but its event is read all the
 * same: the time per wait event names it (bpf/wait-events.bpf.h). With `state`, st_state when it
 * was read with the query id (0 when unknown).
 */
static __always_inline bool read_current_state(struct task_struct *task, struct backend_record *r, __u32 pid,
					       struct query_key *key, __u32 *wait_event, __u32 *state_out)
{
	__u64 queryid = 0;
	__u32 state = 0;
	bool state_known = false;

	/* An exiting process has released its memory: nothing to read, nothing wrong. */
	if (!task->mm)
		return false;

	if (!(r->flags & BACKEND_IDENTITY_KNOWN) && !read_identity(r))
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
		else if (r->wait_event_ptr) {
			PART_BEGIN(PART_IOWAIT_EVENT_READ);
			bpf_probe_read_user(wait_event, sizeof(*wait_event), (void *)r->wait_event_ptr);
			/* Read for the wait events only, where the kernel's iowait flag classes the sleep. */
			PART_END_IF(PART_IOWAIT_EVENT_READ, BPF_CORE_READ_BITFIELD(task, in_iowait));
		}
	}
	if (queryid && !identity_complete(r))
		return false;
	/*
	 * A SQL-level EXECUTE runs its prepared statement, and pg_stat_statements keys that run under
	 * the prepared statement's id (top level), not the EXECUTE's: the query set saw which one it
	 * was (bpf/query.bpf.h). Zero unless that set is attached and an EXECUTE ran.
	 */
	if (queryid && queryid == r->execute_queryid)
		queryid = r->prepared_queryid;
	if (state_out && state_known)
		*state_out = state;
	key->queryid = queryid;
	key->userid = statement_user(r, queryid);
	key->dbid = r->dbid;
	key->toplevel = 1; /* st_query_id only ever holds the top-level statement's id */
	return true;
}

static __always_inline bool read_current(struct task_struct *task, struct backend_record *r, __u32 pid,
					 struct query_key *key, __u32 *wait_event)
{
	return read_current_state(task, r, pid, key, wait_event, NULL);
}

#endif /* PG_STATUS_BPF_H */
