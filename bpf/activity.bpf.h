/* SPDX-License-Identifier: MIT */
/*
 * The maps' activity, so that an idle server costs the collector almost nothing: every change a
 * flush could write is noted here, and the collector's periodic tick reads this one per-CPU
 * value first. Nothing noted, and too little busy time to write the backend rows (the rule in
 * src/flush/metric-rows.ts): the tick ends there, without reading or decoding any map.
 *
 * A note is one per-CPU add: no atomics, no line shared between CPUs. A note may over-count
 * (busy time of a process whose row is not written), never under-count: the tick would wait for
 * figures the flush has to write.
 */
#ifndef ACTIVITY_BPF_H
#define ACTIVITY_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct activity);
} activity SEC(".maps");

static __always_inline struct activity *activity_here(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&activity, &zero);
}

/* Something a flush writes changed: an entry came or went, a figure of a query moved, an overflow. */
static __always_inline void note_change(void)
{
	struct activity *a = activity_here();

	if (a)
		a->changes++;
}

/* `ns` was added to a backend record's busy figures. */
static __always_inline void note_busy(__u64 ns)
{
	struct activity *a = activity_here();

	if (a)
		a->busy_ns += ns;
}

#endif /* ACTIVITY_BPF_H */
