/* SPDX-License-Identifier: MIT */
/*
 * Log2 latency histograms per (query, kind): struct hist_key -> struct hist (bpf/records.h).
 * Fed by the latency and sched sets from the sched_switch path (bpf/latency.bpf.h) and by the
 * io set at block completions (bpf/io.bpf.h).
 */
#ifndef HIST_BPF_H
#define HIST_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "records.h"
#include "maps.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct hist_key);
	__type(value, struct hist);
} histograms SEC(".maps");

/* The histogram slot of a duration: floor(log2(microseconds)), clamped to the last slot. */
static __always_inline __u32 hist_slot(__u64 ns)
{
	__u64 us = ns / 1000;
	__u32 slot = 0;

	if (us >> 32) { us >>= 32; slot += 32; }
	if (us >> 16) { us >>= 16; slot += 16; }
	if (us >> 8) { us >>= 8; slot += 8; }
	if (us >> 4) { us >>= 4; slot += 4; }
	if (us >> 2) { us >>= 2; slot += 2; }
	if (us >> 1) slot += 1;
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
	if (h)
		note_change(); /* the caller counts an observation */
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
