import type { ElfFile } from './elf-file.js';

/**
 * The file offset of the x86-64 `call rel32` inside function `caller` whose target is the
 * function `callee`, or null when the binary has no such direct call (inlined, or another
 * architecture). A uprobe there fires exactly when that call happens, e.g. only when
 * perform_spin_delay really sleeps (pg_usleep), not on every spin.
 *
 * @example
 * findCallSite(elf, 'perform_spin_delay', 'pg_usleep'); // 0x46a18dn on Debian's 15
 */
export function findCallSite(elf: ElfFile, caller: string, callee: string): bigint | null {
  const from = elf.symbol(caller);
  const to = elf.symbol(callee);
  if (!from || !to || from.type !== 2 || to.type !== 2 || from.size === 0n) return null;
  const start = Number(elf.fileOffset(from.value));
  const body = elf.functionBody(from);
  const sites: bigint[] = [];
  for (let i = 0; i + 5 <= body.length; i++) {
    if (body[i] !== 0xe8) continue;
    const next = from.value + BigInt(i + 5);
    if (next + BigInt(body.readInt32LE(i + 1)) === to.value) sites.push(BigInt(start + i));
  }
  // More than one match would mean a byte pattern that only looks like a call: trust none.
  return sites.length === 1 ? sites[0]! : null;
}
