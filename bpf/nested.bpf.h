/* SPDX-License-Identifier: MIT */
/*
 * Nested statements (opt-in set "nested", the query family): a statement run inside another,
 * by a function or procedure (PL/pgSQL, SQL functions, DO), gets its own key with toplevel = 0,
 * as pg_stat_statements keys it with `track = all`, while its time still counts in its
 * top-level statement's figures, as pg_stat_statements counts it there too.
 *
 * st_query_id only ever holds the top-level statement's id, so the nested ones come from the
 * executor: uprobes where each executor starts and ends (ExecutorStart, ExecutorEnd; the
 * programs are in bpf/query.bpf.h) read queryDesc->plannedstmt->queryId and keep, per backend,
 * the executors open in the current top-level statement. The cpu family charges each slice
 * and sleep to the innermost nested statement as well (nested_metrics()); the probes account
 * the running slice at each start and end, so a statement's time is its own to the switch.
 *
 * An executor started while none is open, whose id is the top-level one's, is the top-level
 * statement's own; any other is nested (a CALL or DO has no executor of its own, so its first
 * nested statement is the first executor). An error caught inside a function (PL/pgSQL's
 * EXCEPTION) skips the failed statement's ExecutorEnd: an executor is open only while the frame
 * that started it is on the stack, so one started from the same depth or above (a higher stack
 * pointer: the stack grows down) ends those. The rest (an error out of the statement, a cursor
 * left open) is dropped when the top-level statement is over: the backend idle, or an executor
 * starting in a later statement (st_activity_start_timestamp).
 */
#ifndef NESTED_BPF_H
#define NESTED_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

/* QueryDesc.plannedstmt and PlannedStmt.queryId: 8 and 8 in PostgreSQL 14 to 18 (64-bit). */
const volatile __u32 querydesc_plannedstmt_off = 8;
const volatile __u32 plannedstmt_queryid_off = 8;

/* The key of nested statement `queryid` under the user and database of `top`. */
static __always_inline struct query_key nested_key(const struct query_key *top, __u64 queryid, __u32 userid)
{
	struct query_key k = *top;

	k.toplevel = 0;
	k.queryid = queryid;
	if (userid)
		k.userid = userid; /* a SECURITY DEFINER function's statements run as its owner */
	return k;
}

/* The figures of nested statement `queryid` under the user and database of `top`; NULL for none (0). */
static __always_inline struct metrics *nested_metrics(const struct query_key *top, __u64 queryid, __u32 userid)
{
	struct query_key k;

	if (!queryid)
		return NULL;
	k = nested_key(top, queryid, userid);
	return query_key_metrics(&k);
}

/* The executors of an earlier top-level statement are over. */
static __always_inline void nested_reset(struct backend_record *r)
{
	r->nested_depth = 0;
	r->nested_current = 0;
	r->nested_current_userid = 0;
}

/* Once per switch-out, after the slice is charged: a backend gone idle has no statement open. */
static __always_inline void nested_on_switch_out(struct backend_record *r, __u32 status_state)
{
	if (r->nested_depth && is_idle_state(status_state))
		nested_reset(r);
	r->nested_sleep_queryid = r->nested_current;
	r->nested_sleep_userid = r->nested_current_userid;
}

/*
 * An executor starts, called with stack pointer `sp`: `queryid` is its statement's,
 * `top_queryid` what st_query_id holds.
 */
static __always_inline void nested_push(struct backend_record *r, __u64 query_desc, __u64 queryid, __u64 top_queryid,
					__u64 statement_us, __u64 sp, __u32 userid)
{
	__u32 depth = r->nested_depth;
	bool nested;
	int i;

	if (depth && statement_us != r->nested.statement_us)
		depth = 0; /* left by an earlier statement (an error, a cursor still open) */
	/* Those started from this frame or one above it are over (an error skipped their end). */
	for (i = NESTED_MAX - 1; i >= 0; i--) {
		if ((__u32)i == depth - 1 && depth <= NESTED_MAX && r->nested.stack[i] <= sp)
			depth--;
	}
	if (!depth)
		r->nested.statement_us = statement_us;
	/*
	 * With no top-level id yet, this executor is the top-level statement's own: pg_stat_statements
	 * clears the id of a SQL-level EXECUTE, and the prepared statement's ExecutorStart reports
	 * its id as the top level's (pg_stat_statements counts it with toplevel = true).
	 */
	nested = depth > 0 || (top_queryid && queryid != top_queryid);
	if (depth < NESTED_MAX) {
		r->nested.query_desc[depth] = query_desc;
		r->nested.queryid[depth] = nested ? queryid : 0;
		r->nested.stack[depth] = sp;
		r->nested.userid[depth] = userid;
	}
	r->nested_depth = depth + 1;
	/* A nested statement without an id (pg_stat_statements has none either): its time stays with the top level. */
	r->nested_current = nested ? queryid : 0;
	r->nested_current_userid = nested ? userid : 0;
}

/*
 * An executor ends: returns the nested statement's id when it was one (its call is counted),
 * 0 otherwise. Executors above it that never ended (an error caught by PL/pgSQL) end with it.
 */
static __always_inline __u64 nested_pop(struct backend_record *r, __u64 query_desc, __u32 *userid)
{
	__u32 depth = r->nested_depth;
	__u64 queryid;
	int i, found = -1;

	for (i = NESTED_MAX - 1; i >= 0; i--) {
		if ((__u32)i < depth && r->nested.query_desc[i] == query_desc) {
			found = i;
			break;
		}
	}
	if (found < 0) {
		/*
		 * One deeper than NESTED_MAX (kept as a count only), or not started in this statement.
		 * Once it ends, the deepest one kept is the innermost known again.
		 */
		if (depth > NESTED_MAX) {
			r->nested_depth = depth - 1;
			r->nested_current = r->nested.queryid[NESTED_MAX - 1];
			r->nested_current_userid = r->nested.userid[NESTED_MAX - 1];
		}
		return 0;
	}
	queryid = r->nested.queryid[found];
	if (userid)
		*userid = r->nested.userid[found];
	r->nested_depth = found;
	r->nested_current = found > 0 ? r->nested.queryid[found - 1] : 0;
	r->nested_current_userid = found > 0 ? r->nested.userid[found - 1] : 0;
	return queryid;
}

#endif /* NESTED_BPF_H */
