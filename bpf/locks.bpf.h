/* SPDX-License-Identifier: MIT */
/*
 * The lock families: opt-in probe sets that say *which* lock a query waited for, on top of
 * the default set's lock_wait_ms / lwlock_wait_ms (which come from the wait event at each
 * sleep and cost nothing extra).
 *
 *   locks    heavyweight lock waits by LOCKTAG type and LOCKMODE (and relation where the tag
 *            has one): USDT lock__wait__start/done, or ProcSleep entry + return without USDT.
 *   lwlock   LWLock waits by tranche: USDT lwlock__wait__start/done (tranche name and mode),
 *            or PGSemaphoreLock entry + return without USDT (tranche id from the wait event,
 *            which LWLockAcquire sets before it sleeps).
 *   spinlock spinlock delays: the pg_usleep call inside perform_spin_delay, reached only when
 *            spinning on a spinlock (s_lock, an LWLock's wait list, a buffer header) did not
 *            get it.
 *
 * All of them fire only when a backend actually waits, never on an uncontended acquisition.
 * Waits are aggregated here, in bounded hashes keyed by (query key, what was waited for).
 * Wait time here is wall time from the wait's start to its end probe, so it includes the
 * run-queue wait after the backend was woken; lock_wait_ms / lwlock_wait_ms count only the
 * sleep. A wait cut short by an error (lock_timeout, a cancel: both leave ProcSleep by longjmp;
 * with USDT also a deadlock, reported before lock__wait__done) never reaches its end probe:
 * its start record is overwritten by the next wait (LRU-bounded), so it is not counted here,
 * while lock_wait_ms still has its time.
 *
 * The map records (lwlock_wait_key here, lock_wait_key and wait_totals in bpf/lock-waits.bpf.h)
 * are read by the collector by field name from BTF (src/families/locks/).
 */
#ifndef LOCKS_BPF_H
#define LOCKS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "records.h"
#include "maps.bpf.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"
#include "lock-waits.bpf.h"

#define TRANCHE_NAME_LEN 32

/* Postgres' LWLockMode (lwlock.h, 14-18), as the USDT probe passes it, or unknown. */
enum lwlock_mode {
	LWLOCK_MODE_EXCLUSIVE = 0,
	LWLOCK_MODE_SHARED = 1,
	LWLOCK_MODE_WAIT_UNTIL_FREE = 2,
	LWLOCK_MODE_UNKNOWN = 0xff, /* no USDT: the semaphore sleep does not say which mode */
};

/* An LWLock tranche id (the low 16 bits of a PG_WAIT_LWLOCK wait event), or unknown. */
enum lwlock_tranche {
	LWLOCK_TRANCHE_UNKNOWN = 0xffffffff, /* the wait event at the sleep was not an LWLock's */
};

/* LWLock waits of one query, by tranche (and mode when the USDT probe gives it). */
struct lwlock_wait_key {
	struct query_key q;
	enum lwlock_tranche tranche_id; /* from *my_wait_event_info (PG_WAIT_LWLOCK | tranche) */
	enum lwlock_mode mode;
	char tranche[TRANCHE_NAME_LEN]; /* the name the USDT probe passes; empty without USDT */
};

/* LockTagType values whose field1 is a database and field2 a relation (lock.h, 14-18). */
#define LOCKTAG_RELATION            0
#define LOCKTAG_RELATION_EXTEND     1
#define LOCKTAG_DATABASE_FROZEN_IDS 2
#define LOCKTAG_PAGE                3
#define LOCKTAG_TUPLE               4
#define LOCKTAG_OBJECT              8
#define LOCKTAG_ADVISORY            10
#define LOCKTAG_APPLY_TRANSACTION   11

/* PG17's ProcSleep(locallock, table, dontWait) returns at once for dontWait: not a wait. */
const volatile __u32 proc_sleep_dont_wait_arg = 0;

/* Which lock a waiting backend asked for, from its wait's start to its end. */
struct lock_wait_start {
	__u64 ts;
	__u32 locktag_type;
	__u32 mode;
	__u32 database;
	__u32 relation;
};

struct lwlock_wait_start {
	__u64 ts;
	__u32 wait_event;
	__u32 pad;
};

/* LRU: a start whose end never came (error exit, process gone) ages out by itself. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct lock_wait_start);
} lock_wait_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct lwlock_wait_start);
} lwlock_wait_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lwlock_wait_key);
	__type(value, struct wait_totals);
} lwlock_waits SEC(".maps");

/*
 * The query the calling backend waits in. Its query id is 0 when the wait came before the
 * statement had one (a statement without an id, or an LWLock wait during parse analysis):
 * those waits are kept under queryid 0 (per user and database) rather than dropped; false only
 * when the backend is not one we report on. Heavyweight lock waits before the id are held
 * until the statement has it (lock_wait_end).
 */
static __always_inline bool waiting_query(__u32 pid, struct query_key *q)
{
	struct backend_record *r = reported_backend(pid);

	return r && read_current(bpf_get_current_task_btf(), r, pid, q, NULL);
}

static __always_inline void lock_wait_begin(__u32 field1, __u32 field2, __u32 locktag_type, __u32 mode)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct lock_wait_start s = { .locktag_type = locktag_type, .mode = mode };

	switch (locktag_type) {
	case LOCKTAG_RELATION:
	case LOCKTAG_RELATION_EXTEND:
	case LOCKTAG_PAGE:
	case LOCKTAG_TUPLE:
		s.relation = field2;
		s.database = field1;
		break;
	case LOCKTAG_DATABASE_FROZEN_IDS:
	case LOCKTAG_OBJECT:
	case LOCKTAG_ADVISORY:
	case LOCKTAG_APPLY_TRANSACTION:
		s.database = field1;
		break;
	}
	s.ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&lock_wait_starts, &pid, &s, BPF_ANY);
}

static __always_inline void lock_wait_end(void)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct lock_wait_start *s = bpf_map_lookup_elem(&lock_wait_starts, &pid);
	struct lock_wait_key key = {};
	struct backend_record *r;
	__u32 state = 0;
	__u64 ns;

	if (!s)
		return;
	ns = bpf_ktime_get_ns() - s->ts;
	key.locktag_type = s->locktag_type;
	key.mode = s->mode;
	key.database = s->database;
	key.relation = s->relation;
	bpf_map_delete_elem(&lock_wait_starts, &pid);
	r = reported_backend(pid);
	if (!r || !read_current_state(bpf_get_current_task_btf(), r, pid, &key.q, NULL, &state))
		return;
	/* Before the statement has its id (parse analysis): held until it has one, like lock_wait_ms. */
	if (holds_before_query_id(r, &key.q, state))
		hold_lock_wait(r, &key, ns);
	else
		add_totals(&lock_waits, &key, 1, ns, COUNTER_LOCK_WAITS_FULL);
}

/* USDT lock__wait__start(field1, field2, field3, field4, locktag_type, mode), PG 14-18. */
SEC("usdt")
int BPF_USDT(on_lock_start, __u32 field1, __u32 field2, __u32 field3, __u32 field4, __u32 locktag_type, int mode)
{
	lock_wait_begin(field1, field2, locktag_type & 0xff, mode);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_lock_done)
{
	lock_wait_end();
	return 0;
}

/*
 * ProcSleep(LOCALLOCK *locallock, ...): every version 14-18 takes the LOCALLOCK first, and
 * it starts with LOCALLOCKTAG { LOCKTAG lock; LOCKMODE mode; }, LOCKTAG being
 * { uint32 field1, field2, field3; uint16 field4; uint8 locktag_type; uint8 lockmethodid; }.
 */
struct pg_locallock_tag {
	__u32 field1;
	__u32 field2;
	__u32 field3;
	__u16 field4;
	__u8 locktag_type;
	__u8 lockmethodid;
	__s32 mode;
};

SEC("uprobe")
int BPF_KPROBE(on_procsleep, void *locallock)
{
	struct pg_locallock_tag tag;
	__u32 pid = (__u32)bpf_get_current_pid_tgid();

	if (proc_sleep_dont_wait_arg == 3 && (__u8)PT_REGS_PARM3(ctx)) {
		bpf_map_delete_elem(&lock_wait_starts, &pid);
		return 0;
	}
	if (bpf_probe_read_user(&tag, sizeof(tag), locallock))
		return 0;
	lock_wait_begin(tag.field1, tag.field2, tag.locktag_type, tag.mode);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_procsleep_rt)
{
	lock_wait_end();
	return 0;
}

/* The backend's wait event now (LWLockAcquire reports PG_WAIT_LWLOCK | tranche before it sleeps). */
static __always_inline __u32 current_wait_event(__u32 pid)
{
	struct backend_record *r = reported_backend(pid);
	__u64 ptr = r ? r->wait_event_ptr : 0;
	__u32 event = 0;

	if (!ptr && bpf_probe_read_user(&ptr, sizeof(ptr), (void *)my_wait_event_info_addr))
		return 0;
	if (ptr)
		bpf_probe_read_user(&event, sizeof(event), (void *)ptr);
	return event;
}

static __always_inline void lwlock_wait_begin(bool lwlock_only)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct lwlock_wait_start s = { .wait_event = current_wait_event(pid) };

	if (lwlock_only && (s.wait_event & PG_WAIT_CLASS_MASK) != PG_WAIT_LWLOCK) {
		/* a semaphore sleep for something else (group XID clearing, ...): not an LWLock wait */
		bpf_map_delete_elem(&lwlock_wait_starts, &pid);
		return;
	}
	s.ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&lwlock_wait_starts, &pid, &s, BPF_ANY);
}

static __always_inline void lwlock_wait_end(const char *name, enum lwlock_mode mode)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct lwlock_wait_start *s = bpf_map_lookup_elem(&lwlock_wait_starts, &pid);
	struct lwlock_wait_key key = {};
	__u64 ns;

	if (!s)
		return;
	ns = bpf_ktime_get_ns() - s->ts;
	key.tranche_id = (s->wait_event & PG_WAIT_CLASS_MASK) == PG_WAIT_LWLOCK ? s->wait_event & 0xffff
										: LWLOCK_TRANCHE_UNKNOWN;
	key.mode = mode;
	bpf_map_delete_elem(&lwlock_wait_starts, &pid);
	if (name)
		bpf_probe_read_user_str(key.tranche, sizeof(key.tranche), name);
	if (waiting_query(pid, &key.q))
		add_totals(&lwlock_waits, &key, 1, ns, COUNTER_LWLOCK_WAITS_FULL);
}

/* USDT lwlock__wait__start/done(const char *tranche_name, LWLockMode mode). */
SEC("usdt")
int BPF_USDT(on_lwlock_start)
{
	lwlock_wait_begin(false);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_lwlock_done, const char *tranche, int mode)
{
	lwlock_wait_end(tranche, mode);
	return 0;
}

/* PGSemaphoreLock(PGSemaphore sema): one semaphore sleep (futex) of a backend. */
SEC("uprobe")
int BPF_KPROBE(on_sema_lock)
{
	lwlock_wait_begin(true);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_sema_lock_rt)
{
	lwlock_wait_end(NULL, LWLOCK_MODE_UNKNOWN);
	return 0;
}

/*
 * The pg_usleep call inside perform_spin_delay: a spinlock (s_lock, an LWLock's wait list, a
 * buffer header) was still taken after spins_per_delay tries, so the backend sleeps (1 ms and
 * up, growing). One hit is one spinlock delay; the sleep itself shows up as other_wait_ms
 * under the SpinDelay wait event. Probing here rather than at perform_spin_delay's entry
 * keeps the trap off the spin loop, which it would slow a hundredfold.
 */
SEC("uprobe")
int BPF_KPROBE(on_spin_delay)
{
	__u32 pid = (__u32)bpf_get_current_pid_tgid();
	struct backend_record *r;
	struct query_key q = {};
	struct metrics *qm;

	r = reported_backend(pid);
	if (!r)
		return 0;
	r->m.spinlock_delays++;
	if (read_current(bpf_get_current_task_btf(), r, pid, &q, NULL)) {
		qm = statement_metrics(r, &q);
		if (qm)
			qm->spinlock_delays++;
	}
	return 0;
}

#endif /* LOCKS_BPF_H */
