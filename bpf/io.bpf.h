/* SPDX-License-Identifier: MIT */
/*
 * The io family (set "io", default where the tracepoints exist): the block IO a backend
 * causes, and the writeback throttling it suffers.
 *
 * A block request is created in the submitter's context (block_io_start, from
 * blk_mq_bio_to_request, Linux 6.5+), but it may be issued by kblockd and is completed in
 * softirq/hardirq context on whatever task happens to be running. So the owner (pid and query
 * key) is remembered per struct request at creation, in a bounded hash, and bytes, ios and
 * latency are charged to it at block_rq_complete. A request merged into another
 * (block_rq_merge) gives its bytes to that one and is forgotten.
 *
 * A completion can also go unseen: the kernel skips tracing BPF programs on a CPU that is
 * inside a bpf() map operation or a kprobe/perf_event program of anyone (bpf_prog_active),
 * and a softirq completing a request may land right there (0.1-1% of requests on our shared
 * test hosts, where other collectors poll their maps all the time). Request structs are
 * preallocated per tag and reused, so such a request still has its entry when its struct is
 * next started (by anyone): it is charged then, with the bytes it was created with and
 * without a latency observation (io_completions_missed).
 *
 * Writeback throttling (balance_dirty_pages): the pause the kernel imposes on a task that
 * dirties pages faster than they are written back. Like the memory family's stalls it is an
 * overlay: the pause is an io_schedule_timeout, which the cpu family counts in io_wait_ms.
 */
#ifndef IO_BPF_H
#define IO_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "maps.bpf.h"
#include "hist.bpf.h"
#include "attribution.bpf.h"
#include "aio.bpf.h"

/* Nanoseconds per jiffy (1e9 / CONFIG_HZ), written by the collector; 0 = unknown. */
const volatile __u64 jiffy_ns = 0;

/* Who a block request belongs to, from its creation to its completion. */
struct io_owner {
	struct query_key key;
	__u64 start_ns;
	__u32 pid;
	__u32 op;            /* REQ_OP_* */
	__u32 start_bytes;   /* rq->__data_len when it was created */
	__u32 counted_bytes; /* completed bytes charged so far */
	__u32 performer_pid; /* the io worker that created it for the owner `pid` (bpf/aio.bpf.h); 0: pid's own */
	__u32 pad;
	/* When `pid` and `performer_pid` started: by the completion either pid may be another process's. */
	__u64 task_start_ns;
	__u64 performer_start_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct io_owner);
} io_inflight SEC(".maps");

#define REQ_OP_MASK_ 0xffu /* (1 << REQ_OP_BITS) - 1 */

/*
 * One round of balance_dirty_pages(). `pause` > 0 (jiffies) means the task is about to sleep
 * that long in io_schedule_timeout(); rounds that only adjust the rate have pause <= 0.
 */
SEC("tp_btf/balance_dirty_pages")
int BPF_PROG(on_dirty_pause, struct bdi_writeback *wb, struct dirty_throttle_control *dtc,
	     unsigned long dirty_ratelimit, unsigned long task_ratelimit, unsigned long dirtied, unsigned long period,
	     long pause)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct backend_record *r;
	struct query_key key = {};
	struct metrics *qm;
	__u64 ns;

	if (pause <= 0 || !is_postmaster_family(task))
		return 0;
	ns = (__u64)pause * jiffy_ns;
	if (!memio_backend(task, task->pid, &r, &key))
		return 0;
	if (r) {
		r->m.writeback_throttle_ns += ns;
		note_busy(ns);
	}
	qm = statement_metrics(r, &key);
	if (qm)
		qm->writeback_throttle_ns += ns;
	return 0;
}

/*
 * Entries in io_inflight. Every block request on the host passes the programs below; while no
 * Postgres request is in flight (a cached OLTP load) they stop at this one load instead of
 * touching the hash.
 */
__u64 io_tracked = 0;

static __always_inline void inflight_forget(__u64 id)
{
	if (!bpf_map_delete_elem(&io_inflight, &id))
		__sync_fetch_and_add(&io_tracked, -1);
}

/* Adds to one backend record (NULL: nothing), from any CPU. */
static __always_inline void io_charge_backend(struct backend_record *r, __u32 op, __u32 bytes, bool done)
{
	if (!r)
		return;
	if (op == REQ_OP_WRITE) {
		__sync_fetch_and_add(&r->m.blk_write_bytes, bytes);
		if (done)
			__sync_fetch_and_add(&r->m.blk_write_ios, 1);
	} else {
		__sync_fetch_and_add(&r->m.blk_read_bytes, bytes);
		if (done)
			__sync_fetch_and_add(&r->m.blk_read_ios, 1);
	}
}

/*
 * Charges `bytes` (and one request when `done`) to the owner's backend and query, and to the
 * io worker that performed it for the owner, if any (its own row, as pg_stat_io keeps one).
 * Atomic: the backend record is shared by all CPUs, and a completion may interrupt another
 * completion on the same CPU that is adding to the same query's per-CPU value.
 */
static __always_inline void io_charge(const struct io_owner *owner, __u32 bytes, bool done)
{
	struct backend_record *r = record_of(owner->pid, owner->task_start_ns);
	struct metrics *qm = query_metrics_of(r, &owner->key, owner->pid); /* in interrupt context: not current's */

	io_charge_backend(r, owner->op, bytes, done);
	if (owner->performer_pid)
		io_charge_backend(record_of(owner->performer_pid, owner->performer_start_ns), owner->op, bytes, done);
	if (!qm)
		return;
	if (owner->op == REQ_OP_WRITE) {
		__sync_fetch_and_add(&qm->blk_write_bytes, bytes);
		if (done)
			__sync_fetch_and_add(&qm->blk_write_ios, 1);
	} else {
		__sync_fetch_and_add(&qm->blk_read_bytes, bytes);
		if (done)
			__sync_fetch_and_add(&qm->blk_read_ios, 1);
	}
}

/* Data only: an empty write is a cache flush (fsync's REQ_PREFLUSH), not an IO of its own. */
static __always_inline bool io_counts(const struct io_owner *owner)
{
	return (owner->op == REQ_OP_READ || owner->op == REQ_OP_WRITE) && owner->start_bytes;
}

/*
 * The struct `id` is being reused or was merged away. An entry still there means either a
 * request whose completion no program saw (charged now, see the top of this file) or, when
 * `merged`, one whose bytes went to another request (nothing to charge).
 */
static __always_inline void inflight_retire(__u64 id, bool merged)
{
	struct io_owner *owner;

	if (!io_tracked)
		return;
	owner = bpf_map_lookup_elem(&io_inflight, &id);
	if (!owner)
		return;
	if (!merged && io_counts(owner)) {
		io_charge(owner,
			  owner->start_bytes > owner->counted_bytes ? owner->start_bytes - owner->counted_bytes : 0,
			  true);
		count(COUNTER_IO_COMPLETIONS_MISSED);
	}
	inflight_forget(id);
}

/* A request is created from a bio, in the context of the task that submitted the bio. */
SEC("tp_btf/block_io_start")
int BPF_PROG(on_blk_start, struct request *rq)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 id = (__u64)rq;
	struct backend_record *r;
	struct io_owner owner = {};
	struct aio_owner *acting;

	/* This struct may still carry an owner from a request whose completion went unseen. */
	inflight_retire(id, false);
	if (!is_postmaster_family(task))
		return 0;
	/*
	 * Postgres processes are single-threaded, but with io_method = io_uring the kernel may
	 * punt a backend's IO to an io-wq thread (iou-wrk-<pid>) of the backend's thread group:
	 * its IO is the backend's. (Our embedded 18 build has no io_uring; not tested here.)
	 */
	if (task->pid != task->tgid)
		task = task->group_leader;
	owner.pid = task->pid;
	owner.task_start_ns = task->start_time;
	if (!memio_backend(task, owner.pid, &r, &owner.key))
		return 0;
	/* An io worker performing a backend's IO (bpf/aio.bpf.h): the request is that backend's. */
	acting = aio_acting_for(owner.pid);
	if (acting) {
		owner.performer_pid = owner.pid;
		owner.performer_start_ns = owner.task_start_ns;
		owner.pid = acting->pid;
		owner.task_start_ns = acting->task_start_ns;
		owner.key = acting->key;
	}
	owner.start_ns = bpf_ktime_get_ns();
	owner.op = rq->cmd_flags & REQ_OP_MASK_;
	owner.start_bytes = rq->__data_len;
	/*
	 * Not map_lookup_or_init(): the entry must be this request's own, and io_tracked counts
	 * only the entries added here.
	 */
	if (!bpf_map_update_elem(&io_inflight, &id, &owner, BPF_NOEXIST))
		__sync_fetch_and_add(&io_tracked, 1);
	else
		count(COUNTER_IO_INFLIGHT_FULL);
	return 0;
}

/* `next` was merged into another request, which carries its bytes from now on. */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(on_blk_merge, struct request *next)
{
	inflight_retire((__u64)next, true);
	return 0;
}

/*
 * (Part of) a request completed: softirq or hardirq context, `current` is unrelated. Bytes
 * count as they complete; the request counts once, when its last bytes complete.
 */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_blk_done, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 id = (__u64)rq;
	struct io_owner *owner;
	bool done;

	if (!io_tracked)
		return 0;
	owner = bpf_map_lookup_elem(&io_inflight, &id);
	if (!owner)
		return 0;
	done = nr_bytes >= rq->__data_len;
	if (io_counts(owner) && nr_bytes) {
		owner->counted_bytes += nr_bytes;
		io_charge(owner, nr_bytes, done);
		if (done)
			hist_observe_atomic(&owner->key, HIST_IO, bpf_ktime_get_ns() - owner->start_ns);
	}
	if (done)
		inflight_forget(id);
	return 0;
}

#endif /* IO_BPF_H */
