import type { ElfFile } from './elf-file.js';

/**
 * The link-time address of the global a one-load accessor returns: `GetOuterUserId()` is
 * `return OuterUserId;`, which every x86-64 build we know compiles to `mov eax, [rip+disp32]; ret`
 * (with an `endbr64` first where the build has CET). OuterUserId and CurrentUserId are static
 * in miscinit.c, so no symbol names them in a stripped binary; their accessors are exported
 * (extensions call them). null when the function is missing or compiled otherwise (another
 * architecture, a debug build): the caller falls back to the session's user.
 *
 * @example
 * accessorGlobal(elf, 'GetOuterUserId'); // 0x892958n on Debian's 15
 */
export function accessorGlobal(elf: ElfFile, accessor: string): bigint | null {
  const fn = elf.symbol(accessor);
  if (fn?.type !== 2) return null;
  const body = elf.functionBody({ ...fn, size: fn.size > 0n && fn.size < 16n ? fn.size : 16n });
  const endbr = body.length >= 4 && body[0] === 0xf3 && body[1] === 0x0f && body[2] === 0x1e && body[3] === 0xfa ? 4 : 0;
  const at = endbr;
  // 8b 05 disp32: mov eax, DWORD PTR [rip+disp32]; c3: ret
  if (body.length < at + 7 || body[at] !== 0x8b || body[at + 1] !== 0x05 || body[at + 6] !== 0xc3) return null;
  return fn.value + BigInt(at + 6) + BigInt(body.readInt32LE(at + 2));
}

/**
 * The globals the backend keeps its current users in, as pg_stat_statements reads them:
 * OuterUserId (SET ROLE, SET SESSION AUTHORIZATION; what a top-level statement runs as) and
 * CurrentUserId (also switched inside SECURITY DEFINER functions; what a nested statement runs
 * as). Link-time addresses; null where not found.
 */
export function userIdGlobals(elf: ElfFile): { outerUserId: bigint | null; currentUserId: bigint | null } {
  return { outerUserId: accessorGlobal(elf, 'GetOuterUserId'), currentUserId: accessorGlobal(elf, 'GetUserId') };
}
