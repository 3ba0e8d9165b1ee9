/* SPDX-License-Identifier: MIT */
/*
 * Timing one part of a program from inside it, for bench/switch-parts.ts only: compiled in with
 * -DPART_TIMING, never in the shipped object (there both macros are empty).
 *
 * kernel.bpf_stats_enabled times whole programs, and on a shared 2-vCPU VM two builds of
 * on_sched_switch differ by ±200 ns from round to round (docs/measured.md): a part costing tens
 * of ns cannot be told from that noise by A/B. Here each run of the part sits between two
 * bpf_ktime_get_ns() calls, and a third call right after them times an empty region, which holds
 * the same clock read: the part's own cost is part_ns − part_empty_ns, summed over every run.
 */
#ifndef PART_TIMING_BPF_H
#define PART_TIMING_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#ifdef PART_TIMING
enum timed_part {
	PART_WAIT_EVENTS = 0,       /* the switch-out's wait-event accounting (bpf/cpu.bpf.h) */
	PART_IOWAIT_EVENT_READ = 1, /* the wait event's read for a task in IO sleep (bpf/pg-status.bpf.h) */
	PART_BACKEND_WAIT_MAP = 2,  /* inside PART_WAIT_EVENTS: the backend_wait_events update */
	PART_QUERY_WAIT_MAP = 3,    /* inside PART_WAIT_EVENTS: the query_wait_events update */
	PART_QUERY_WAIT_SLOT = 4, /* before PART_WAIT_EVENTS (bpf/cpu.bpf.h, query_add_wait): a queries entry's slot */
	PART_COUNT,
};

/* Per part: runs, ns between its two clock reads, ns of the empty region read after it. */
__u64 part_runs[PART_COUNT] = {};
__u64 part_ns[PART_COUNT] = {};
__u64 part_empty_ns[PART_COUNT] = {};

#define PART_BEGIN(part) __u64 part##_begin = bpf_ktime_get_ns()
/* The run is counted only when `counted` holds (evaluated in timing builds only). */
#define PART_END_IF(part, counted)                                                         \
	do {                                                                               \
		__u64 part_end = bpf_ktime_get_ns();                                       \
		__u64 part_after = bpf_ktime_get_ns();                                     \
		if (counted) {                                                             \
			__sync_fetch_and_add(&part_runs[part], 1);                         \
			__sync_fetch_and_add(&part_ns[part], part_end - part##_begin);     \
			__sync_fetch_and_add(&part_empty_ns[part], part_after - part_end); \
		}                                                                          \
	} while (0)
#define PART_END(part) PART_END_IF(part, true)
#else
#define PART_BEGIN(part)
#define PART_END_IF(part, counted)
#define PART_END(part)
#endif

/*
 * The wait events' whole cost, A/B inside one program, for bench/switch-parts.ts --ab only:
 * compiled in with -DWAIT_EVENTS_AB. on_sched_switch leaves the wait-event accounting out in
 * every other 2^23 ns (8.4 ms) of the clock, and times each of its runs into the half it began
 * in. The halves share the workload, the machine's state and the clock reads, so the difference
 * of their means per run is what the accounting adds, code after it included: an A/B across
 * builds cannot resolve that here (±200 ns between its rounds), and a part timed from inside
 * takes on what the code before it left pending (docs/measured.md).
 */
#ifdef WAIT_EVENTS_AB
#define WAIT_EVENTS_AB_SHIFT 23

/* Per half (0: with the wait events, 1: without): on_sched_switch runs and their ns. */
__u64 ab_runs[2] = {};
__u64 ab_ns[2] = {};

#define AB_BEGIN() __u64 ab_begin = bpf_ktime_get_ns()
#define AB_END()                                                          \
	do {                                                              \
		__u64 ab_end = bpf_ktime_get_ns();                        \
		__u32 ab_half = (ab_begin >> WAIT_EVENTS_AB_SHIFT) & 1;   \
		__sync_fetch_and_add(&ab_runs[ab_half], 1);               \
		__sync_fetch_and_add(&ab_ns[ab_half], ab_end - ab_begin); \
	} while (0)
#ifdef WAIT_EVENTS_AB_SAME
/* The control (--same-halves): both halves with the wait events, so their difference is the method's own. */
#define WAIT_EVENTS_OFF() false
#else
/* True in the half without the wait events (a run crossing the boundary is one in 10^4). */
#define WAIT_EVENTS_OFF() ((bpf_ktime_get_ns() >> WAIT_EVENTS_AB_SHIFT) & 1)
#endif
#else
#define AB_BEGIN()
#define AB_END()
#define WAIT_EVENTS_OFF() false
#endif

#endif /* PART_TIMING_BPF_H */
