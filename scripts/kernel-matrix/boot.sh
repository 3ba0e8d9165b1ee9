#!/usr/bin/env bash
# Boots one kernel of the matrix under QEMU's TCG (/dev/kvm exists on our machines but a KVM
# guest hangs at boot), with the root filesystem and the per-run archive as its initramfs, no
# network and no disk; the guest powers itself off. The console goes to stdout; the guest writes
# its results to the second serial port, RESULTS. A hard timeout ends a guest that hangs.
#
#   bash scripts/kernel-matrix/boot.sh VMLINUZ ROOTFS.cpio.gz GUEST.cpio.gz RESULTS [TIMEOUT_S]
# docs/kernel-matrix.md
set -euo pipefail
usage="usage: boot.sh VMLINUZ ROOTFS.cpio.gz GUEST.cpio.gz RESULTS [TIMEOUT_S]"
vmlinuz=${1:?$usage} rootfs=${2:?$usage} guest=${3:?$usage} results=${4:?$usage} timeout=${5:-300}
command -v qemu-system-x86_64 >/dev/null || { echo "boot: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)" >&2; exit 2; }
initrd=$(mktemp /tmp/pg-bpf-stats-initrd.XXXXXX)
trap 'rm -f "$initrd"' EXIT
# The kernel unpacks concatenated archives in turn: the root, then the package and /init.
cat "$rootfs" "$guest" >"$initrd"
: >"$results"
exec_status=0
timeout --kill-after=10 "$timeout" qemu-system-x86_64 -accel tcg -smp 2 -m 4096 \
  -display none -monitor none -no-reboot -nic none \
  -kernel "$vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 rdinit=/init panic=-1 loglevel=4 8250.nr_uarts=2" \
  -serial stdio -serial "file:$results" </dev/null || exec_status=$?
exit "$exec_status"
