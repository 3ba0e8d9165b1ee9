// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The collector's BPF object: one object for every probe set, so the families share the
 * backends and queries maps (bpf/attribution.bpf.h). User space attaches and detaches the
 * programs by set (src/collector/, src/families/).
 *
 * Each header includes what it needs and can be read on its own; this file only fixes the
 * order. Shared parts first, then one header per family, each with its own maps and its
 * SEC() programs:
 *
 *   records.h          record layouts and enums shared with user space (through BTF)
 *   activity.bpf.h     what changed since the collector's last look (its idle tick reads only this)
 *   maps.bpf.h         overflow counters, map_lookup_or_init()
 *   part-timing.bpf.h  timing parts of a program, in bench builds only (-DPART_TIMING)
 *   hist.bpf.h         per-query log-linear histograms
 *   pg-status.bpf.h    reading a backend's PgBackendStatus: identity, query id, wait event
 *   query-changes.bpf.h  which query keys changed since the collector's last read
 *   attribution.bpf.h  backends and queries maps, the postmaster filter
 *   latency.bpf.h      statement latency and run-queue histograms, fed by the cpu family (and a backend's exit)
 *   nested.bpf.h       opt-in "nested": nested statements' own keys, fed by the cpu family
 *   wait-blockers.bpf.h  opt-in "blockers": who woke each wait (sched_waking), fed to by the cpu family
 *   wait-events.bpf.h  off-CPU time per wait event, per query and per backend, fed by the cpu family
 *   cpu.bpf.h          default set "cpu": sched_switch accounting and the CPU-clock tick
 *   query.bpf.h        opt-in "query": exact call counts; "nested": the executor probes
 *   memory.bpf.h       "memory": reclaim and compaction stalls
 *   io.bpf.h           "io": block IO and writeback throttling
 *   locks.bpf.h        opt-in "locks", "lwlock", "spinlock"
 *   llc.bpf.h          opt-in "llc": sampled LLC references and misses
 *   instance.bpf.h     finding the postmaster's tgid from inside its pid namespace (not a set)
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "records.h"
#include "maps.bpf.h"
#include "hist.bpf.h"
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

#include "latency.bpf.h"
#include "nested.bpf.h"
#include "cpu.bpf.h"
#include "query.bpf.h"
#include "memory.bpf.h"
#include "aio.bpf.h"
#include "io.bpf.h"
#include "locks.bpf.h"
#include "llc.bpf.h"
#include "instance.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";
