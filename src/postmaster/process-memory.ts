import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import type { ElfFile } from './elf-file.js';

/**
 * Reads another process's memory through /proc/<pid>/mem (root only). Used once at start-up
 * to calibrate where Postgres keeps its per-backend status, never on the collection path.
 *
 * @example
 * const mem = new ProcessMemory(pid);
 * const pointer = mem.readU64(address);
 */
export class ProcessMemory {
  constructor(readonly pid: number) {}

  read(address: bigint, length: number): Buffer {
    const buffer = Buffer.alloc(length);
    const fd = openSync(`/proc/${this.pid}/mem`, 'r');
    try {
      const got = readSync(fd, buffer, 0, length, address);
      if (got !== length) throw new Error(`short read of ${length} bytes at 0x${address.toString(16)} in pid ${this.pid}`);
    } finally {
      closeSync(fd);
    }
    return buffer;
  }

  readU64(address: bigint): bigint {
    return this.read(address, 8).readBigUInt64LE(0);
  }

  readU32(address: bigint): number {
    return this.read(address, 4).readUInt32LE(0);
  }
}

/**
 * The run-time address of a symbol of `binaryPath` in process `pid`: the load bias (start of
 * the mapping at file offset 0) plus the symbol's link-time address.
 */
export function runtimeAddress(pid: number, binaryPath: string, elf: ElfFile, symbol: string): bigint {
  const sym = elf.symbol(symbol);
  if (!sym) throw new Error(`symbol ${symbol} not found in ${binaryPath}`);
  return runtimeAddressOf(pid, binaryPath, elf, sym.value);
}

/** The run-time address in process `pid` of the link-time address `linkTime` of `binaryPath`. */
export function runtimeAddressOf(pid: number, binaryPath: string, elf: ElfFile, linkTime: bigint): bigint {
  if (!elf.isPositionIndependent()) return linkTime;
  const start = mappingStart(pid, binaryPath);
  if (start === null) throw new Error(`${binaryPath} is not mapped in pid ${pid}`);
  return start - elf.firstLoadVaddr() + linkTime;
}

/**
 * Where `binaryPath` (as the process's own maps name it) is mapped from file offset 0 in
 * process `pid`; null when it is not (yet). Two processes of one binary differ by the
 * difference of their starts (ASLR).
 */
export function mappingStart(pid: number, binaryPath: string): bigint | null {
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n');
  for (const line of maps) {
    // 55d0c8a00000-55d0c8b00000 r--p 00000000 fd:00 1234 /usr/lib/postgresql/15/bin/postgres
    const fields = line.trim().split(/\s+/);
    if (fields.length < 6 || fields[5] !== binaryPath || fields[2] !== '00000000') continue;
    return BigInt(`0x${fields[0]!.split('-')[0]}`);
  }
  return null;
}
