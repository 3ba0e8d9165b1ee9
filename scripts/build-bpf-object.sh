#!/usr/bin/env bash
# Compiles one BPF object: build-bpf-object.sh SRC OUT [EXTRA_CLANG_FLAG...]. The flags every
# object is built with live here, so that a bench variant (bench/switch-parts.ts adds
# -DPART_TIMING) is the shipped object plus its one define. Needs build/vmlinux.h (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1
out=$2
shift 2
clang -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_x86 \
  -I build -I bpf -I /usr/include/x86_64-linux-gnu "$@" \
  -c "$src" -o "$out.tmp"
llvm-strip -g "$out.tmp" 2>/dev/null || true
# Kernels without a private stack for tracing programs (Debian's 6.1 and 6.12, some 6.18 hosts)
# refuse a call chain over 512 bytes: such an object fails the build here, naming the chain,
# rather than at load on a user's machine. The old object is left as it was and older than its
# sources, so the next build tries again.
if ! node scripts/bpf-stack-budget.mjs "$out.tmp"; then
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
