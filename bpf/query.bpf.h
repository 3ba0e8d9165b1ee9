/* SPDX-License-Identifier: MIT */
/*
 * The query family (opt-in set "query"): exact call counts from a uprobe where each top-level
 * statement ends. It costs a trap (~4 us here) per statement, which is why it is not in the
 * default set; the cpu family attributes time to queries without it.
 */
#ifndef QUERY_BPF_H
#define QUERY_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"
#include "nested.bpf.h"
#include "cpu.bpf.h"

/*
 * The end of one top-level statement: a uprobe on the query__execute__done site inside
 * PortalRun, or a uretprobe on PortalRun where the build has no USDT. Reads no probe
 * arguments, so it is a plain uprobe program either way.
 */
SEC("uprobe")
int BPF_KPROBE(on_query_done)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = task_record(task, pid);
	struct query_key key = {};
	struct metrics *qm;

	/*
	 * The uprobe fires in every process of the binary: a statement of another cluster is
	 * none of ours, one of our postmaster's children without a record (not switched out
	 * since attach, or backends full) is, and pg_stat_statements counts it: say so.
	 */
	if (!r) {
		__u32 pg_pid;

		if (!is_postmaster_family(task))
			return 0;
		/* The collector's own connection: its exclusion dropped its record until its next switch. */
		pg_pid = pg_pid_of(task);
		if (!bpf_map_lookup_elem(&excluded_pids, &pg_pid))
			count(COUNTER_CALLS_UNATTRIBUTED);
		return 0;
	}
	if (r->flags & BACKEND_EXCLUDED)
		return 0;
	/*
	 * The slice running until now is the ending statement's. A single statement's last slice
	 * ends in the ClientRead sleep that follows it, still under its id; in a multi-statement
	 * query string the next statement follows without a sleep, and the slice would go to it.
	 */
	account_switch_out(task, true, TASK_RUNNING, true, SWITCH_FROM_PROBE);
	/*
	 * A PortalRun inside another one's (EXECUTE running its prepared statement) restores the
	 * outer portal as active before it ends: the outer one's end counts the statement, once.
	 */
	if (active_portal_addr) {
		__u64 portal = 0;

		if (!bpf_probe_read_user(&portal, sizeof(portal), (void *)active_portal_addr) && portal)
			return 0;
	}
	r->m.calls++;
	/* The statement may have just changed the role (SET ROLE): read it as it is at the end. */
	r->run_userid = 0;
	/*
	 * No wait event wanted: a statement ending is not a sleep. Unreadable status or identity:
	 * counted. Read with query id 0: a statement pg_stat_statements does not count either.
	 */
	if (!read_current(task, r, pid, &key, NULL)) {
		count(COUNTER_CALLS_UNATTRIBUTED);
		return 0;
	}
	/* A PREPARE: pg_stat_statements counts no call for it (its time stays under its own id). */
	if (r->uncounted_queryid) {
		bool prepare = r->uncounted_queryid == key.queryid;

		r->uncounted_queryid = 0;
		if (prepare)
			return 0;
	}
	qm = statement_metrics(r, &key);
	if (qm)
		qm->calls++;
	return 0;
}

/* st_query_id as the backend reports it, not mapped (read_current_state maps an EXECUTE's). */
static __always_inline __u64 reported_query_id(const struct backend_record *r)
{
	__u64 queryid = 0;

	if (r->status_ptr && status_query_id_off)
		bpf_probe_read_user(&queryid, sizeof(queryid), (void *)(r->status_ptr + status_query_id_off));
	return queryid;
}

/*
 * ExecuteQuery's call of PortalDefineQuery(portal, name, text, tag, stmts, cplan): the plan a
 * SQL-level EXECUTE runs. Its first PlannedStmt's queryId is the prepared statement's id, under
 * which pg_stat_statements counts the run. pg_stat_statements clears the EXECUTE's own id
 * (track_utility on, its default), and the prepared statement's ExecutorStart then reports its id
 * as the top level's: nothing to map. With track_utility off the EXECUTE keeps an id of its own,
 * and from here on it maps to the prepared statement's (read_current_state). A uprobe at this
 * one call site traps only for SQL-level EXECUTE.
 */
SEC("uprobe")
int BPF_KPROBE(on_execute_plan)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = reported_backend(pid);
	__u64 stmts = PT_REGS_PARM5(ctx), elements = 0, planned = 0, prepared = 0, execute;

	if (!r || !stmts)
		return 0;
	/* List (PostgreSQL 13+): NodeTag, length, max_length, then the elements pointer at 16. */
	if (bpf_probe_read_user(&elements, sizeof(elements), (void *)(stmts + 16)) || !elements ||
	    bpf_probe_read_user(&planned, sizeof(planned), (void *)elements) || !planned ||
	    bpf_probe_read_user(&prepared, sizeof(prepared), (void *)(planned + plannedstmt_queryid_off)))
		return 0;
	execute = reported_query_id(r);
	if (!execute || !prepared)
		return 0;
	r->execute_queryid = execute;
	r->prepared_queryid = prepared;
	return 0;
}

/* PrepareQuery's call of StorePreparedStatement: the statement running is a PREPARE. */
SEC("uprobe")
int BPF_KPROBE(on_prepare_stmt)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = reported_backend(pid);

	if (r)
		r->uncounted_queryid = reported_query_id(r);
	return 0;
}

/*
 * The nested set (bpf/nested.bpf.h): an executor starts or ends. The slice running until now
 * is accounted first (as the CPU-clock sample does), so it goes to the statement it ran for.
 * Plain uprobes on function entry (ExecutorStart, ExecutorEnd), no uretprobe (a trap more,
 * and an error skips it as it skips ExecutorEnd): what an error leaves open is closed by the
 * next executor started from the same depth, or by the statement's end (bpf/nested.bpf.h).
 */
static __always_inline struct backend_record *executor_event(struct task_struct *task, __u32 pid)
{
	struct backend_record *r = reported_backend(pid);

	if (!r)
		return NULL;
	account_switch_out(task, true, TASK_RUNNING, true, SWITCH_FROM_PROBE);
	return r;
}

/* "beg": a program's name shows in bpftool and bpf_stats cut to 15 characters. */
SEC("uprobe")
int BPF_KPROBE(on_executor_beg, void *query_desc)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = executor_event(task, pid);
	struct query_key key = {};
	__u64 planned = 0, queryid = 0;
	__u32 userid = 0;

	if (!r || !read_current(task, r, pid, &key, NULL))
		return 0;
	if (bpf_probe_read_user(&planned, sizeof(planned), query_desc + querydesc_plannedstmt_off) || !planned ||
	    bpf_probe_read_user(&queryid, sizeof(queryid), (void *)(planned + plannedstmt_queryid_off)))
		return 0;
	/* pg_stat_statements keys a nested statement by GetUserId(): CurrentUserId. */
	if (current_user_id_addr && key.userid)
		bpf_probe_read_user(&userid, sizeof(userid), (void *)current_user_id_addr);
	nested_push(r, (__u64)query_desc, queryid, key.queryid, statement_start_us(r), PT_REGS_SP(ctx), userid);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_executor_end, void *query_desc)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r = executor_event(task, pid);
	struct query_key key = {};
	struct metrics *qm;
	__u64 queryid;
	__u32 userid = 0;

	if (!r || !r->nested_depth)
		return 0;
	queryid = nested_pop(r, (__u64)query_desc, &userid);
	if (!queryid || !read_current(task, r, pid, &key, NULL))
		return 0;
	/* pg_stat_statements counts a nested statement's call at its ExecutorEnd too. */
	qm = nested_metrics(&key, queryid, userid);
	if (qm)
		qm->calls++;
	return 0;
}

#endif /* QUERY_BPF_H */
