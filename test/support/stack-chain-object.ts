import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Stack bytes of each frame of the chain caller -> callee -> leaf (multiples of 8). */
export interface ChainFrames {
  caller: number;
  callee: number;
  leaf: number;
}

// Each frame is one buffer that bpf_skb_load_bytes fills, so its depth is the buffer's size.
// The three calls take the three forms clang emits, which the reader resolves differently:
// program -> global function (a relocation naming it), program -> static function (a
// relocation against .text, imm its index), .text -> static function (no relocation, imm
// relative to the call). A socket filter has no private stack on any kernel: the verifier
// holds it to the 512-byte chain rule wherever the native test loads it.
const SOURCE = `#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

static __noinline int leaf(struct __sk_buff *skb)
{
	__u64 buf[LEAF_BYTES / 8];

	if (bpf_skb_load_bytes(skb, 0, buf, sizeof(buf)))
		return 0;
	return buf[0] + buf[LEAF_BYTES / 8 - 1];
}

__noinline int callee(struct __sk_buff *skb)
{
	__u64 buf[CALLEE_BYTES / 8];

	if (bpf_skb_load_bytes(skb, 0, buf, sizeof(buf)))
		return 0;
	return leaf(skb) + buf[0] + buf[CALLEE_BYTES / 8 - 1];
}

SEC("socket")
int caller(struct __sk_buff *skb)
{
	__u64 buf[CALLER_BYTES / 8];

	if (bpf_skb_load_bytes(skb, 0, buf, sizeof(buf)))
		return 0;
	return callee(skb) + leaf(skb) + buf[0] + buf[CALLER_BYTES / 8 - 1];
}
`;

/**
 * Compiles a BPF object of one program whose call chain has the given frames, as
 * scripts/build-bpf-object.sh builds ours (clang -g -O2 -target bpf, then llvm-strip -g), into
 * `dir`; returns its path. Needs clang and libbpf's headers, not root.
 */
export function compileStackChainObject(dir: string, frames: ChainFrames): string {
  const source = join(dir, 'stack-chain.bpf.c');
  writeFileSync(source, SOURCE);
  const object = join(dir, `stack-chain-${frames.caller}-${frames.callee}-${frames.leaf}.bpf.o`);
  execFileSync('clang', [
    '-g',
    '-O2',
    '-target',
    'bpf',
    '-I/usr/include/x86_64-linux-gnu',
    `-DCALLER_BYTES=${frames.caller}`,
    `-DCALLEE_BYTES=${frames.callee}`,
    `-DLEAF_BYTES=${frames.leaf}`,
    '-c',
    source,
    '-o',
    object,
  ]);
  execFileSync('llvm-strip', ['-g', object]);
  return object;
}
