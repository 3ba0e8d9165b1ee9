/* SPDX-License-Identifier: MIT */
/*
 * Finding the postmaster as BPF numbers it (src/instance/). BPF sees every task by its tgid in
 * the initial pid namespace; a collector running inside a container's pid namespace (a pod
 * with a shared process namespace) sees only the container's numbers, and /proc there has no
 * way back. So the collector names the postmaster by what it can see (its pid namespace's nsfs
 * device and inode, its pid there), attaches find_postmaster for a moment, makes the
 * postmaster run (it forks a backend for a new connection), and reads back the tgid BPF knows
 * it by and the level of its pid namespace. Attached only while looking: never on the hot path.
 */
#ifndef INSTANCE_BPF_H
#define INSTANCE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* What the collector looks for: the pid namespace (nsfs st_dev as the kernel encodes it, inode) and the tgid there. */
__u64 seek_pidns_dev = 0;
__u64 seek_pidns_ino = 0;
__u32 seek_tgid = 0;
/* What find_postmaster found: the tgid in the initial pid namespace (0: not yet) and its namespace's level. */
__u32 found_level = 0;
__u32 found_tgid = 0;

/* sched_switch runs in the context of prev: bpf_get_ns_current_pid_tgid names prev in the namespace. */
SEC("tp_btf/sched_switch")
int BPF_PROG(find_postmaster, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct bpf_pidns_info ns = {};

	if (!seek_tgid || bpf_get_ns_current_pid_tgid(seek_pidns_dev, seek_pidns_ino, &ns, sizeof(ns)) ||
	    ns.tgid != seek_tgid)
		return 0;
	found_level = prev->thread_pid->level;
	found_tgid = prev->tgid;
	return 0;
}

#endif /* INSTANCE_BPF_H */
