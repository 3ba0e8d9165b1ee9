import { ElfFile } from './elf-file.js';
import { ProcessMemory, runtimeAddress } from './process-memory.js';

/**
 * LWLock tranche ids to the names Postgres itself reports (pg_stat_activity.wait_event), read
 * once from the postmaster's memory: the built-in tables (IndividualLWLockNames, exported in
 * 14-16; BuiltinTrancheNames, a static table present when the binary keeps .symtab) and the
 * tranches extensions registered in the postmaster (LWLockTrancheNames, or where the binary has no
 * .symtab, NamedLWLockTrancheArray). An id none of them
 * names is shown as "tranche <id>", never guessed.
 *
 * @example
 * const names = new LwlockTrancheNames(target.pid, target.binaryPath, target.mappedPath);
 * names.name(72); // 'BufferContent' on 15 (wherever the binary's tables say so)
 */
export class LwlockTrancheNames {
  private table: Map<number, string> | null = null;

  constructor(
    private readonly pid: number,
    private readonly binaryPath: string,
    /** The binary's path as the postmaster's maps show it (another one in a container). */
    private readonly mappedPath = binaryPath,
  ) {}

  name(id: number): string {
    return this.known(id) ?? `tranche ${id}`;
  }

  /** The tranche's name, or null when none of the tables names it. */
  known(id: number): string | null {
    this.table ??= this.load();
    return this.table.get(id) ?? null;
  }

  private load(): Map<number, string> {
    const names = new Map<number, string>();
    try {
      const elf = ElfFile.read(this.binaryPath);
      const memory = new ProcessMemory(this.pid);
      const readTable = (symbol: string): Array<string | null> | null => {
        const sym = elf.symbol(symbol);
        if (!sym || sym.size === 0n) return null;
        const pointers = memory.read(runtimeAddress(this.pid, this.mappedPath, elf, symbol), Number(sym.size));
        const out: Array<string | null> = [];
        for (let at = 0; at + 8 <= pointers.length; at += 8) out.push(readString(memory, pointers.readBigUInt64LE(at)));
        return out;
      };
      // 14-16 keep the individual locks apart and number the built-in tranches after them;
      // 17+ have one table indexed by tranche id.
      const individual = readTable('IndividualLWLockNames') ?? [];
      for (const [id, n] of individual.entries()) if (n) names.set(id, n);
      const builtin = readTable('BuiltinTrancheNames') ?? [];
      for (const [i, n] of builtin.entries()) if (n) names.set(individual.length + i, n);
      if (builtin.length) this.readRegistered(elf, memory, individual.length + builtin.length, names);
      this.readNamed(elf, memory, names);
    } catch {
      // Unreadable memory or an unexpected layout: ids stay ids.
    }
    return names;
  }

  /**
   * Tranches requested by name in the postmaster (RequestNamedLWLockTranche: pg_stat_statements'),
   * from NamedLWLockTrancheArray, exported, whose entries carry their ids ({ int trancheId; char
   * *trancheName; }, the same in 14-18): for binaries without .symtab (Debian's), where neither
   * BuiltinTrancheNames nor LWLockTrancheNames can be found. Never over a name found already.
   */
  private readNamed(elf: ElfFile, memory: ProcessMemory, names: Map<number, string>): void {
    const { entries, count } = this.readArray(elf, memory, 'NamedLWLockTrancheArray', 'NamedLWLockTrancheRequests', 16);
    for (let i = 0; i < count; i++) {
      const id = entries.readInt32LE(i * 16);
      const n = readString(memory, entries.readBigUInt64LE(i * 16 + 8));
      if (n && id > 0 && !names.has(id)) names.set(id, n);
    }
  }

  /**
   * The array the pointer `arraySymbol` points to, of the `countSymbol` (an int) entries of
   * `entrySize` bytes; none when either symbol is missing or the pointer or count is implausible.
   */
  private readArray(
    elf: ElfFile,
    memory: ProcessMemory,
    arraySymbol: string,
    countSymbol: string,
    entrySize: number,
  ): { entries: Buffer; count: number } {
    const none = { entries: Buffer.alloc(0), count: 0 };
    if (!elf.symbol(arraySymbol) || !elf.symbol(countSymbol)) return none;
    const array = memory.readU64(runtimeAddress(this.pid, this.mappedPath, elf, arraySymbol));
    const count = memory.readU32(runtimeAddress(this.pid, this.mappedPath, elf, countSymbol));
    if (!array || count <= 0 || count > 4096) return none;
    return { entries: memory.read(array, count * entrySize), count };
  }

  /** Tranches registered by extensions loaded into the postmaster (shared_preload_libraries). */
  private readRegistered(elf: ElfFile, memory: ProcessMemory, firstUserDefined: number, names: Map<number, string>): void {
    const { entries: pointers, count: allocated } = this.readArray(elf, memory, 'LWLockTrancheNames', 'LWLockTrancheNamesAllocated', 8);
    for (let i = 0; i < allocated; i++) {
      const n = readString(memory, pointers.readBigUInt64LE(i * 8));
      if (n) names.set(firstUserDefined + i, n);
    }
  }
}

function readString(memory: ProcessMemory, address: bigint): string | null {
  if (!address) return null;
  try {
    const bytes = memory.read(address, 64);
    const end = bytes.indexOf(0);
    const s = bytes.toString('latin1', 0, end < 0 ? 64 : end);
    return /^[\x20-\x7e]+$/.test(s) ? s : null;
  } catch {
    return null;
  }
}
