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

#endif /* PART_TIMING_BPF_H */
