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
mv "$out.tmp" "$out"
