/* SPDX-License-Identifier: MIT */
/*
 * Finding the postmaster as BPF numbers it (src/postmaster/pid-namespace.ts, src/sidecar/postmaster-follower.ts). BPF sees every task by its tgid in
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
#include "pg-status.bpf.h"
#include "attribution.bpf.h"

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

/*
 * Following the postmaster across restarts in the kernel, so that no statement of the new one
 * runs unseen and user space need not poll /proc (src/sidecar/postmaster-follower.ts):
 * on_postmaster_exit points the filter at nothing when the postmaster exits (its number will be
 * reused); adopt_postmaster points it at the successor at the successor's first fork (the
 * startup process), which a new postmaster does long after it chdirs to its data directory and
 * long before it accepts a connection. Both run on rare events (process exit, fork) and return
 * after one or two loads for every other process. The successor is recognised by the binary's
 * and the data directory's inode and device (the kernel's dev_t), written by the collector.
 */
__u64 follow_exe_ino = 0;
__u64 follow_exe_dev = 0;
__u64 follow_dir_ino = 0;
__u64 follow_dir_dev = 0;
/*
 * mm->start_code of the postmaster the addresses below were computed for: the text segment's
 * start moves with the binary's load address (ASLR), and so do the globals.
 */
__u64 follow_start_code = 0;

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_postmaster_exit, struct task_struct *task)
{
	if (task->tgid == postmaster_tgid && task->pid == task->tgid)
		postmaster_tgid = NO_POSTMASTER;
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(adopt_postmaster, struct task_struct *parent, struct task_struct *child)
{
	struct mm_struct *mm = parent->mm;
	struct inode *exe, *dir;
	__u64 start_code;

	if (postmaster_tgid != NO_POSTMASTER || !follow_exe_ino || !mm || !mm->exe_file)
		return 0;
	exe = mm->exe_file->f_inode;
	dir = parent->fs->pwd.dentry->d_inode;
	if (!exe || !dir || exe->i_ino != follow_exe_ino || exe->i_sb->s_dev != follow_exe_dev ||
	    dir->i_ino != follow_dir_ino || dir->i_sb->s_dev != follow_dir_dev)
		return 0;
	start_code = mm->start_code;
	my_be_entry_addr = my_be_entry_addr - follow_start_code + start_code;
	my_wait_event_info_addr = my_wait_event_info_addr - follow_start_code + start_code;
	if (outer_user_id_addr)
		outer_user_id_addr = outer_user_id_addr - follow_start_code + start_code;
	if (current_user_id_addr)
		current_user_id_addr = current_user_id_addr - follow_start_code + start_code;
	if (active_portal_addr)
		active_portal_addr = active_portal_addr - follow_start_code + start_code;
	follow_start_code = start_code;
	pidns_level = parent->thread_pid->level;
	postmaster_tgid = parent->tgid; /* last: the filter matches from here */
	return 0;
}

#endif /* INSTANCE_BPF_H */
