/* SPDX-License-Identifier: MIT */
/*
 * Which query keys changed since the collector last read them, so that a flush reads what
 * changed and not the whole queries map (src/collector/changed-key-reads.ts): with 10,000 statements
 * held and 100 of them run, a flush reads 100.
 *
 * The collector starts a read by incrementing query_read, then takes (lookup-and-delete) the
 * keys noted here, then reads those keys' values. A program adding to a key's figures notes the
 * key the first time it does so on its CPU after query_read moved: the per-CPU value keeps the
 * read it was last noted at (struct metrics' read_stamp). So the hot path pays one compare per
 * update, and one hash update per key, CPU and flush.
 *
 * An addition that races the collector's read (noted before the take, added after the value was
 * read) is read again: the collector reads the keys it took last time once more. Full (more keys
 * changed between two reads than it holds: evicted keys' slots taken by new ones): counted in
 * counters[query_changes_full], and the collector reads the whole map once, which is what it
 * also does every minute and at its first flush.
 */
#ifndef QUERY_CHANGES_BPF_H
#define QUERY_CHANGES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "maps.bpf.h"

/* Incremented by the collector when it starts a read of the changed keys (a .bss variable). */
__u64 query_read = 0;

/* Sized like queries by user space (max_entries set before load). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct query_key);
	__type(value, __u8);
} query_changes SEC(".maps");

/* `m`, this CPU's figures of `key` in the queries map, is about to change. */
static __always_inline void note_query_change(const struct query_key *key, struct metrics *m)
{
	note_key_change(&query_changes, key, &m->read_stamp, *(volatile __u64 *)&query_read, COUNTER_QUERY_CHANGES_FULL);
}

#endif /* QUERY_CHANGES_BPF_H */
