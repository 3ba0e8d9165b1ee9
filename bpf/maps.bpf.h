/* SPDX-License-Identifier: MIT */
/*
 * Map helpers every family uses: the overflow counters, and the one way to find-or-create a
 * value in a bounded hash so that a full map is counted rather than silently dropped.
 */
#ifndef MAPS_BPF_H
#define MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "activity.bpf.h"

/*
 * Overflow and failure counts by enum counter_index, read by the collector for bpf_stats.health.
 * Keyed by a plain __u32: the kernel refuses any other BTF key type for an array map, and libbpf
 * then created the map a second time without BTF, leaving a warning in every load log.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Never read: keeps enum counter_index (the counters' names) in the BTF the contract is generated from. */
const volatile enum counter_index counter_names = COUNTER_MAX;

static __always_inline void count(enum counter_index index)
{
	__u32 key = index;
	__u64 *value = bpf_map_lookup_elem(&counters, &key);

	if (value)
		__sync_fetch_and_add(value, 1);
	note_change();
}

/* The kernel's answer to an insert into a map at max_entries (include/uapi/asm-generic/errno-base.h). */
#define E2BIG 7

/*
 * An insert the kernel refused: counted in counters[full] when the map was at max_entries,
 * in counters[map_no_memory] otherwise. A map that allocates on demand takes each element
 * from a per-CPU cache the kernel refills from irq_work, i.e. once interrupts are on again
 * (kernel/bpf/memalloc.c). A per-CPU value's cache is refilled one value at a time and holds
 * one to three (Linux 6.8, commits 5b95e638f134 and 0e2ba9f96f9b), so a second new key on one
 * CPU within one sched_switch, a refill that failed (the percpu allocator's atomic pool empty),
 * or a memory cgroup at its limit refuses an insert with room left (as, rarely, does a bucket
 * lock the kernel gave up on). Telling the two apart keeps "full" meaning full, a size to
 * raise; the collector evicts quiet keys on either (src/flush/metric-rows.ts).
 */
static __always_inline void count_refusal(long err, enum counter_index full)
{
	count(err == -E2BIG ? full : COUNTER_MAP_NO_MEMORY);
}

/*
 * The value of `key` in the hash `map`, inserted as a copy of `init` when absent; NULL when
 * it cannot be added, which is counted (count_refusal). BPF_NOEXIST keeps a value another CPU
 * inserted between our lookup and our update: that update fails, and the second lookup finds
 * the winner's value. An insertion is not noted as a change (see map_lookup_or_init).
 */
static __always_inline void *map_lookup_or_insert(void *map, const void *key, const void *init, enum counter_index full)
{
	void *value = bpf_map_lookup_elem(map, key);
	long err;

	if (value)
		return value;
	err = bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	if (err && !bpf_map_lookup_elem(map, key)) {
		count_refusal(err, full);
		return NULL;
	}
	return bpf_map_lookup_elem(map, key);
}

/* The same, an insertion noted as a change a flush would write (bpf/activity.bpf.h). */
static __always_inline void *map_lookup_or_init(void *map, const void *key, const void *init, enum counter_index full)
{
	void *value = bpf_map_lookup_elem(map, key);

	if (value)
		return value;
	value = map_lookup_or_insert(map, key, init, full);
	if (value)
		note_change();
	return value;
}

/*
 * A per-CPU value of `key` is about to change: `key` goes into the set `changes` (a hash the
 * collector takes at each read, bpf/query-changes.bpf.h), once per CPU and read. `stamp`, in the
 * value, keeps the read number it was last noted at; `read` is the set's read number, which the
 * collector moves on before it takes the set. A full set is counted in counters[full].
 */
static __always_inline void note_key_change(void *changes, const void *key, __u64 *stamp, __u64 read,
					    enum counter_index full)
{
	static const __u8 changed = 1;

	if (*stamp == read)
		return;
	*stamp = read;
	if (bpf_map_update_elem(changes, key, &changed, BPF_ANY))
		count(full);
}

#endif /* MAPS_BPF_H */
