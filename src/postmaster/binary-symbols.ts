import { ElfFile } from './elf-file.js';
import type { PostmasterTarget } from './postmaster-target.js';

/**
 * What the probe sets ask of a binary, read once per binary path: the ELF read is not free. The
 * file itself (9 MB for Debian's postgres) is not kept: the collector would hold it for its whole life.
 */
interface BinarySymbols {
  functions: Set<string>;
}

const cache = new Map<string, BinarySymbols>();

/**
 * The target binary's function symbols, read on first use.
 *
 * @example
 * binarySymbols(target).functions.has('ExecutorStart');
 */
export function binarySymbols(target: Pick<PostmasterTarget, 'binaryPath'>): BinarySymbols {
  let info = cache.get(target.binaryPath);
  if (!info) {
    const elf = ElfFile.read(target.binaryPath);
    info = { functions: new Set([...elf.symbols().values()].filter((s) => s.type === 2).map((s) => s.name)) };
    cache.set(target.binaryPath, info);
  }
  return info;
}

/** Whether the target binary has a function `name` (a uprobe can be attached by name). */
export function hasFunction(target: Pick<PostmasterTarget, 'binaryPath'>, name: string): boolean {
  return binarySymbols(target).functions.has(name);
}
