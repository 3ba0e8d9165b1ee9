/* SPDX-License-Identifier: MIT */
/*
 * The heavyweight lock waits of the opt-in `locks` set (bpf/locks.bpf.h), by query and what
 * was waited for. Apart from that family because the cpu family charges a wait held from
 * before the statement's query id (bpf/attribution.bpf.h) once the statement has one.
 */
#ifndef LOCK_WAITS_BPF_H
#define LOCK_WAITS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "maps.bpf.h"

/* Heavyweight lock waits of one query, by what it waited for (LOCKTAG type, LOCKMODE). */
struct lock_wait_key {
	struct query_key q;
	__u32 locktag_type; /* enum LockTagType: 0 relation, 1 extend, ... 5 transactionid, ... */
	__u32 mode;         /* LOCKMODE: 1 AccessShareLock ... 8 AccessExclusiveLock */
	__u32 database;     /* locktag_field1 for relation-scoped, object and advisory tags, else 0 */
	__u32 relation;     /* locktag_field2 for relation, extend, page and tuple tags, else 0 */
};

struct wait_totals {
	__u64 waits;
	__u64 wait_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lock_wait_key);
	__type(value, struct wait_totals);
} lock_waits SEC(".maps");

static __always_inline void add_totals(void *map, const void *key, __u64 waits, __u64 ns,
				       enum counter_index full_counter)
{
	static const struct wait_totals zero = {};
	struct wait_totals *t = map_lookup_or_init(map, key, &zero, full_counter);

	if (!t)
		return;
	note_change();
	__sync_fetch_and_add(&t->waits, waits);
	__sync_fetch_and_add(&t->wait_ns, ns);
}

#endif /* LOCK_WAITS_BPF_H */
