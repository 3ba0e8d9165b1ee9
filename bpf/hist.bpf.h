/* SPDX-License-Identifier: MIT */
/*
 * Log-linear latency histograms per (query, kind): struct hist_key -> struct hist (bpf/records.h).
 * Fed by the latency and sched sets from the sched_switch path (bpf/latency.bpf.h) and by the
 * io set at block completions (bpf/io.bpf.h). As for query keys (bpf/query-changes.bpf.h), a
 * histogram that changes is noted in hist_changes, so that a flush reads the histograms that
 * changed, not every one the map holds (src/collector/changed-key-reads.ts).
 */
#ifndef HIST_BPF_H
#define HIST_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "maps.bpf.h"

/*
 * Preallocated, unlike the maps of bpf/attribution.bpf.h. Allocated on demand, a per-CPU hash
 * takes each new value from a per-CPU cache the kernel refills from irq_work (kernel/bpf/
 * memalloc.c), so only once interrupts are on again; sched_switch runs with them off, and a
 * new statement's first switch-out under CPU contention creates two histograms (run queue and
 * latency): the second found the cache empty and was refused (test/integration/
 * histogram-reads.test.ts, "two new histograms in one switch": 74-75 of 100 latency observations
 * lost on demand, none preallocated).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct hist_key);
	__type(value, struct hist);
} histograms SEC(".maps");

/* Never read: keeps enum hist_layout (the bucket layout) in the BTF the contract is generated from. */
const volatile enum hist_layout hist_layout_names = HIST_SUB_BITS;

/* Incremented by the collector when it starts a read of the changed histograms (a .bss variable). */
__u64 hist_read = 0;

/* The histograms changed since the collector's last read of them; sized like histograms by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct hist_key);
	__type(value, __u8);
} hist_changes SEC(".maps");

/* `h`, this CPU's copy of the histogram `key`, is about to change. */
static __always_inline void note_hist_change(const struct hist_key *key, struct hist *h)
{
	note_key_change(&hist_changes, key, &h->read_stamp, *(volatile __u64 *)&hist_read, COUNTER_HIST_CHANGES_FULL);
}

/* 1 when x > c, by arithmetic (both below 2^63): the sign of c - x. */
#define ABOVE(x, c) (((__u64)(c) - (x)) >> 63)

/*
 * The histogram slot of a duration (layout: bpf/records.h, struct hist). With top the highest
 * set bit of us | 8 (so at least HIST_SUB_BITS), shift = top - HIST_SUB_BITS keeps the top bit
 * and the HIST_SUB_BITS bits below it: us >> shift is 8..15 (or us itself below 8), and
 * (shift << HIST_SUB_BITS) + (us >> shift) numbers the buckets in order. Clamped to the last slot.
 * Without branches: the slot indexes the histogram, so the verifier tracks it exactly, and a
 * branch per bit made it walk the rest of on_sched_switch once per slot value (~40% of the
 * instructions it processed, and of the object's load time).
 */
static __always_inline __u32 hist_slot(__u64 ns)
{
	__u64 us = ns / 1000, top_bits = us | (1ULL << HIST_SUB_BITS), top = 0, shift, slot;

	barrier_var(top_bits); /* or clang turns ABOVE() back into a compare and a branch */
	/* Binary search for the top bit: when top_bits is 2^bits or more, shift it down by `bits` and count them. */
#define DROP_BITS_ABOVE(bits)                                   \
	shift = ABOVE(top_bits, (1ULL << (bits)) - 1) * (bits); \
	top_bits >>= shift;                                     \
	top += shift;
	DROP_BITS_ABOVE(32)
	DROP_BITS_ABOVE(16)
	DROP_BITS_ABOVE(8)
	DROP_BITS_ABOVE(4)
	DROP_BITS_ABOVE(2)
	DROP_BITS_ABOVE(1)
#undef DROP_BITS_ABOVE
	shift = top - HIST_SUB_BITS;
	slot = (shift << HIST_SUB_BITS) + (us >> shift);
	return slot < HIST_SLOTS ? slot : HIST_SLOTS - 1;
}

/* The query's histogram of `kind`, created empty on first use; NULL (counted) when the map is full. */
static __always_inline struct hist *hist_for(const struct query_key *q, enum hist_kind kind)
{
	static const struct hist empty_hist = {};
	struct hist_key key = { .q = *q, .kind = kind };
	struct hist *h;

	if (!q->queryid)
		return NULL;
	h = map_lookup_or_init(&histograms, &key, &empty_hist, COUNTER_HISTOGRAMS_FULL);
	if (h) {
		/* The caller counts an observation. */
		note_change();
		note_hist_change(&key, h);
	}
	return h;
}

/* Counts one observation of `ns` in the query's histogram of `kind`, and keeps its maximum. */
static __always_inline void hist_observe(const struct query_key *q, enum hist_kind kind, __u64 ns)
{
	struct hist *h = hist_for(q, kind);

	if (!h)
		return;
	h->slots[hist_slot(ns) & (HIST_SLOTS - 1)]++;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

/*
 * hist_observe() for a caller that may be interrupted by itself (a block completion in
 * softirq or hardirq context): an atomic increment. The maximum is a plain store, so of two
 * completions racing on one CPU the larger may be lost.
 */
static __always_inline void hist_observe_atomic(const struct query_key *q, enum hist_kind kind, __u64 ns)
{
	struct hist *h = hist_for(q, kind);

	if (!h)
		return;
	__sync_fetch_and_add(&h->slots[hist_slot(ns) & (HIST_SLOTS - 1)], 1);
	if (ns > h->max_ns)
		h->max_ns = ns;
}

#endif /* HIST_BPF_H */
