#!/bin/sh
# PID 1 of a kernel-matrix guest (rdinit=/init; scripts/kernel-matrix/boot.sh): the file systems
# a fresh host has mounted, then the run (guest-run.mjs), then power off. The results go to the
# second serial port; this console (the first) is the log.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
hostname kernel-matrix
node /kernel-matrix/guest-run.mjs
echo "guest-init: guest-run.mjs exited with $?"
sync
echo o >/proc/sysrq-trigger
sleep 30
