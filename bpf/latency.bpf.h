/* SPDX-License-Identifier: MIT */
/*
 * The latency family (set "latency": statement latency) and the sched set's run-queue waits:
 * per-query histograms (bpf/hist.bpf.h) fed from the sched_switch path.
 *
 * Both are switched by the collector at run time through `hist_switches` (.bss): one load on
 * every switch-out when both are off. account_switch_out() (bpf/cpu.bpf.h) calls
 * hist_on_switch_out() once.
 *
 * Statement latency without a uprobe: Postgres' pgstat_report_activity() keeps, next to each
 * other in PgBackendStatus, st_activity_start_timestamp (the statement's start,
 * GetCurrentStatementStartTimestamp(), written with each STATE_RUNNING report that carries the
 * statement text) and st_state_start_timestamp (GetCurrentTimestamp() at the last state
 * change). When a backend goes to sleep waiting for its client (ClientRead), it has reported
 * STATE_IDLE (or idle in transaction) just before, so state_start - activity_start is the
 * statement's latency as pg_stat_activity would show it (query_start .. state_change). One
 * 24-byte user read (xact_start, activity_start, state_start) per ClientRead sleep or
 * preemption, and a 4-byte read of st_state once per state change unless xact_start says the
 * backend is outside a transaction; a statement is counted once, keyed by its state_start
 * (several switches in one idle period are one statement).
 */
#ifndef LATENCY_BPF_H
#define LATENCY_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "hist.bpf.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

/* Bits of hist_switches: work inside the switch-out (on_sched_switch or on_switch_3args) that an opt-in set switches on. */
enum hist_switch {
	HIST_SWITCH_LATENCY = 0x1, /* the `latency` set is attached */
	HIST_SWITCH_RUNQ = 0x2,    /* the `sched` set is attached */
};

/* Written by the collector after load, when a set that owns a bit attaches or detaches (src/collector/). */
enum hist_switch hist_switches = 0;

/*
 * Wall-clock time when collection (re)started, as Postgres stamps its statements (TimestampTz:
 * us since 2000-01-01), written by the collector with tracking_since_ns. A backend idle since
 * before then still shows its last statement's end at its first switch-outs: that statement
 * ended while nothing was attached, and is not observed.
 */
__s64 tracking_since_pg_us = 0;

static __always_inline void observe_statement_end(struct backend_record *r, const struct query_key *key,
						  bool client_read)
{
	/* xact_start (when known to precede them), activity_start, state_start: us since 2000-01-01 */
	__s64 ts[3] = {};
	__s64 *stamps = status_xact_start_before ? &ts[0] : &ts[1];
	__u32 size = status_xact_start_before ? 24 : 16, state = 0;
	__u64 at = r->status_ptr + status_activity_start_off - (status_xact_start_before ? 8 : 0);

	if (!status_activity_start_off || !r->status_ptr)
		return;
	if (bpf_probe_read_user(stamps, size, (void *)at))
		return;
	/* Same state as at the last look, or track_activities off (both 0). */
	if ((__u64)ts[2] == r->last_state_start_us || ts[1] <= 0 || ts[2] < ts[1])
		return;
	r->last_state_start_us = ts[2];
	if (ts[2] < tracking_since_pg_us)
		return;
	/*
	 * Only a statement that ended: idle, idle in transaction (aborted). A backend that waits
	 * for its client while still active (COPY FROM STDIN, an extended-protocol client slow to
	 * send Sync) or is preempted mid-statement has state_start = its running report. Waiting
	 * for the client outside any transaction (xact_start 0) can only be idle, which saves the
	 * st_state read for every autocommit statement.
	 */
	if (status_state_off && !(client_read && status_xact_start_before && ts[0] == 0)) {
		if (bpf_probe_read_user(&state, sizeof(state), (void *)(r->status_ptr + status_state_off)))
			return;
		if (!is_idle_state(state))
			return;
	}
	hist_observe(key, HIST_QUERY_LATENCY, (__u64)(ts[2] - ts[1]) * 1000);
}

/*
 * One call from account_switch_out, once the slice is accounted: `key` is the query the slice
 * belonged to (for a backend going idle: the statement that just ended), `runq_ns` the slice's
 * run-queue wait, `next_class` why the backend leaves the CPU.
 *
 * A statement's end is looked for when the backend waits for its client (ClientRead) and
 * when it leaves the CPU still runnable: a client that answers at once (it was woken on this
 * CPU and preempted the backend right after ReadyForQuery) leaves no ClientRead sleep, and
 * missed a third of the statements in a sequential client loop here.
 *
 * A global function, verified once per program (see query_add_wait in bpf/cpu.bpf.h).
 */
__noinline int hist_on_switch_out(struct backend_record *r, const struct query_key *key, __u64 runq_ns, __u32 next_class)
{
	enum hist_switch switches = hist_switches;

	if (!switches || !r || !key)
		return 0;
	if ((switches & HIST_SWITCH_RUNQ) && runq_ns)
		hist_observe(key, HIST_RUNQ, runq_ns);
	if ((switches & HIST_SWITCH_LATENCY) &&
	    (next_class == SLEEP_CLIENT || (next_class == SLEEP_NONE && status_state_off)))
		observe_statement_end(r, key, next_class == SLEEP_CLIENT);
	return 1;
}

/*
 * A backend whose client's Terminate (or end of connection) is already there when a statement
 * ends reads it without sleeping and exits: it never leaves the CPU idle, so its last statement
 * is looked for here, at its exit (12 sessions sending Query and Terminate together: 4 of 12
 * observed without this, test/integration/latency-llc.test.ts). Attached with the latency set.
 *
 * sched_process_exit runs before exit_mm() since Linux 6.16 (commit 3e816361e94a,
 * "sched/tracepoints: Move and extend the sched_process_exit() tracepoint"); on older kernels
 * the task's memory is gone there, read_current_state() says so, and such a statement stays
 * unobserved. The status slot may already belong to a new backend once this one released its
 * PGPROC (ProcKill runs before the exit): its st_procpid then names that backend, and nothing
 * is read from it. A statement already observed at a switch-out has the same state_start and
 * is not counted twice.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_backend_exit, struct task_struct *task)
{
	__u32 pid = task->pid;
	__s32 procpid = 0;
	struct backend_record *r;
	struct query_key key = {};

	if (!(hist_switches & HIST_SWITCH_LATENCY))
		return 0;
	r = reported_backend(pid); /* the exiting task is current */
	if (!r || !r->status_ptr)
		return 0;
	if (bpf_probe_read_user(&procpid, sizeof(procpid), (void *)(r->status_ptr + status_procpid_off)) ||
	    (procpid && procpid != (__s32)r->pg_pid))
		return 0;
	if (read_current_state(task, r, pid, &key, NULL, NULL))
		observe_statement_end(r, &key, false);
	return 0;
}

#endif /* LATENCY_BPF_H */
