/* SPDX-License-Identifier: MIT */
/*
 * The aio set (PostgreSQL 18 with io_method = worker, default where it applies): block IO an
 * io worker performs on behalf of a backend is charged to that backend and its query too.
 *
 * With io workers a backend stages a read, submits it to a shared queue and waits; an io
 * worker takes the handle (a PgAioHandle in main shared memory) and does the pread itself, so
 * the block requests are created in the worker's context and bpf/io.bpf.h would give them to
 * the worker alone. Main shared memory is mapped at the same address in every postmaster child
 * (they are forked, not exec'd), so a handle's address names the same IO in the owner and in
 * the worker:
 *   - in the owner, pgaio_worker_submit(num_staged_ios, staged_ios) (the method's submit
 *     callback: one trap per batch of up to PGAIO_SUBMIT_BATCH_SIZE IOs) records every
 *     handle's owner: its pid and the query key it is on now;
 *   - in the worker, the call of pgaio_io_perform_synchronously(ioh) in IoWorkerMain looks the
 *     handle up and marks the worker as acting for that owner, until the instruction after
 *     that call. Probes at those two call-site instructions, not at the function's entry and
 *     return: backends call the same function for every IO they perform themselves (each
 *     single-block read of an index lookup that misses shared buffers), and an entry probe
 *     cost pgbench -S ~1.6 uprobe+uretprobe pairs per transaction (bench/aio-cost.ts);
 *   - bpf/io.bpf.h's request start charges a marked worker's requests to the owner (backend
 *     row and query), and to the worker's own row as well, as pg_stat_io keeps per-process
 *     rows.
 * An IO the owner performs itself (the queue was full) is already charged in its own context.
 *
 * Bounded: handles leave aio_handles when a worker performs them. Those it never sees (the
 * owner performed them, or they were submitted before an attach) stay until their handle,
 * from a fixed pool, is submitted again, or the LRU map makes room for newer ones: the live
 * entries are the few IOs queued for the workers. Marks are one per worker.
 */
#ifndef AIO_BPF_H
#define AIO_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "records.h"
#include "maps.bpf.h"
#include "attribution.bpf.h"

/* Who submitted an IO handle: the backend (its pid as the kernel numbers it) and its query then. */
struct aio_owner {
	struct query_key key;
	__u32 pid;
	__u32 pad;
	__u64 task_start_ns; /* the backend's start (task->start_time): its pid may be another's by the IO's end */
};

/* PgAioHandle address -> its owner, from submission until a worker performs it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct aio_owner);
} aio_handles SEC(".maps");

/* io worker pid -> the owner of the IO it is performing now. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct aio_owner);
} aio_acting SEC(".maps");

/* Entries in aio_acting: while 0 (every Postgres but 18 with io workers) io.bpf.h does not look. */
__u64 aio_acting_now = 0;

enum aio_submit_bound {
	AIO_SUBMIT_BATCH_MAX = 32, /* PGAIO_SUBMIT_BATCH_SIZE: the most handles one submit call gets */
};

/* Room for one batch of handle pointers (too large for the stack next to the owner). */
struct aio_batch {
	__u64 ios[AIO_SUBMIT_BATCH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aio_batch);
} aio_batch_scratch SEC(".maps");

/* pgaio_worker_submit(uint16 num_staged_ios, PgAioHandle **staged_ios), in the owning backend. */
SEC("uprobe")
int BPF_KPROBE(on_aio_submit, unsigned long num_staged_ios, void *staged_ios)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct aio_owner owner = {};
	struct backend_record *r;
	struct aio_batch *batch;
	__u32 zero = 0, n = num_staged_ios & 0xffff;

	if (!is_postmaster_family(task) || !n)
		return 0;
	owner.pid = task->pid;
	owner.task_start_ns = task->start_time;
	/* The collector's own connections are not reported: their IO stays with the worker. */
	if (!memio_backend(task, owner.pid, &r, &owner.key))
		return 0;
	batch = bpf_map_lookup_elem(&aio_batch_scratch, &zero);
	if (!batch)
		return 0;
	if (n > AIO_SUBMIT_BATCH_MAX)
		n = AIO_SUBMIT_BATCH_MAX;
	if (bpf_probe_read_user(batch->ios, n * sizeof(__u64), staged_ios))
		return 0;
	for (__u32 i = 0; i < AIO_SUBMIT_BATCH_MAX; i++) {
		if (i >= n)
			break;
		if (bpf_map_update_elem(&aio_handles, &batch->ios[i], &owner, BPF_ANY))
			count(COUNTER_AIO_HANDLES_FULL);
	}
	return 0;
}

/* At IoWorkerMain's call of pgaio_io_perform_synchronously(PgAioHandle *ioh): a worker is about to perform one handle's IO. */
SEC("uprobe")
int BPF_KPROBE(on_aio_perform, void *ioh)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	__u64 handle = (__u64)ioh;
	struct aio_owner *found, owner;

	found = bpf_map_lookup_elem(&aio_handles, &handle);
	if (!found)
		return 0;
	owner = *found;
	bpf_map_delete_elem(&aio_handles, &handle);
	if (owner.pid == pid) /* not a worker: its own IO is charged in its context */
		return 0;
	if (!bpf_map_update_elem(&aio_acting, &pid, &owner, BPF_NOEXIST))
		__sync_fetch_and_add(&aio_acting_now, 1);
	else
		bpf_map_update_elem(&aio_acting, &pid, &owner, BPF_EXIST); /* a mark whose return went unseen */
	return 0;
}

/* At the instruction after that call: the IO is done. */
SEC("uprobe")
int BPF_KPROBE(on_aio_performed)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();

	if (aio_acting_now && !bpf_map_delete_elem(&aio_acting, &pid))
		__sync_fetch_and_add(&aio_acting_now, -1);
	return 0;
}

/* The owner `pid` (an io worker) is performing an IO for now, or NULL. */
static __always_inline struct aio_owner *aio_acting_for(__u32 pid)
{
	if (!aio_acting_now)
		return NULL;
	return bpf_map_lookup_elem(&aio_acting, &pid);
}

#endif /* AIO_BPF_H */
