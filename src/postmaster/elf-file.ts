import { closeSync, fstatSync, openSync } from 'node:fs';
import { readFileRange } from '../file-range.js';

/** One symbol from .symtab or .dynsym. */
export interface ElfSymbol {
  name: string;
  /** Link-time virtual address (st_value). */
  value: bigint;
  size: bigint;
  /** STT_OBJECT = 1, STT_FUNC = 2. */
  type: number;
}

/** A USDT probe described by a .note.stapsdt entry. */
export interface UsdtNote {
  provider: string;
  name: string;
  /** Link-time address of the probe site. */
  pc: bigint;
}

interface Section {
  name: string;
  type: number;
  offset: number;
  size: number;
  link: number;
  entsize: number;
}

/** A symbol table with its string table, each read on its own. */
interface SymbolTable {
  entries: Buffer;
  strings: Buffer;
}

const SHT_SYMTAB = 2;
const SHT_NOTE = 7;
const SHT_DYNSYM = 11;
const PT_LOAD = 1;
const SYMBOL_SIZE = 24;

/** Reads `length` bytes at file offset `offset` (fewer at the end of the file). */
type ReadAt = (offset: number, length: number) => Buffer;

/**
 * The parts of an ELF64 little-endian executable that target discovery needs: symbols (to
 * find Postgres globals such as MyBEEntry in every backend) and USDT notes (to know whether
 * the build has `--enable-dtrace` probes).
 *
 * Only the headers, the symbol tables and the notes are read from the file (~0.5 MB of
 * Debian's 9 MB postgres), and a symbol is found by searching those bytes for its name rather
 * than by decoding all ~10,000 of them into objects: both were most of the start's time
 * between connecting and loading the BPF programs (bench/journal/start-up.md#six-cuts-to-the-start).
 *
 * @example
 * const elf = ElfFile.read('/usr/lib/postgresql/15/bin/postgres');
 * elf.symbol('MyBEEntry')?.value; // link-time address
 * elf.usdtNotes().some((n) => n.name === 'query__done');
 */
export class ElfFile {
  private readonly readAt: ReadAt;
  private readonly header: Buffer;
  private readonly sections: Section[];
  private readonly symbolTables: SymbolTable[];
  private readonly notes: Buffer[];
  private readonly segments: Array<{ vaddr: bigint; offset: bigint; filesz: bigint }>;
  private readonly found = new Map<string, ElfSymbol | undefined>();
  private symbolIndex?: Map<string, ElfSymbol>;

  /** `data`: the whole file (or its first bytes, for files that are not ELF). */
  constructor(data: Buffer, path?: string);
  constructor(readAt: ReadAt, path?: string);
  constructor(
    source: Buffer | ReadAt,
    readonly path = '<buffer>',
  ) {
    this.readAt = typeof source === 'function' ? source : (offset, length) => source.subarray(offset, offset + length);
    const header = this.readAt(0, 64);
    if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${path} is not an ELF file`);
    if (header[4] !== 2 || header[5] !== 1) throw new Error(`${path} is not a 64-bit little-endian ELF file`);
    this.header = header;
    this.sections = this.readSections();
    this.segments = this.readLoadSegments();
    this.symbolTables = [SHT_SYMTAB, SHT_DYNSYM].flatMap((type) =>
      this.sections
        .filter((s) => s.type === type && this.sections[s.link])
        .map((s) => ({
          entries: this.readAt(s.offset, s.size),
          strings: this.readAt(this.sections[s.link]!.offset, this.sections[s.link]!.size),
        })),
    );
    this.notes = this.sections.filter((s) => s.type === SHT_NOTE && s.name === '.note.stapsdt').map((s) => this.readAt(s.offset, s.size));
  }

  /** Reads what the class needs of the file at `path`, not the whole file. */
  static read(path: string): ElfFile {
    const fd = openSync(path, 'r');
    try {
      const fileSize = fstatSync(fd).size;
      // Clamped to the file: a damaged header must not make it allocate what it says.
      return new ElfFile((offset, length) => readFileRange(fd, offset, Math.min(length, fileSize - offset)), path);
    } finally {
      closeSync(fd);
    }
  }

  /** The lowest PT_LOAD virtual address, rounded to its page: the load bias reference. */
  firstLoadVaddr(): bigint {
    let lowest: bigint | null = null;
    for (const segment of this.segments) {
      const base = segment.vaddr - segment.offset;
      if (lowest === null || base < lowest) lowest = base;
    }
    return lowest ?? 0n;
  }

  /** The file offset of a link-time address (what uprobes attach by). */
  fileOffset(vaddr: bigint): bigint {
    for (const segment of this.segments) {
      if (vaddr >= segment.vaddr && vaddr < segment.vaddr + segment.filesz) return vaddr - segment.vaddr + segment.offset;
    }
    throw new Error(`${this.path}: address 0x${vaddr.toString(16)} is in no loaded segment`);
  }

  /** The bytes of function `symbol`'s body, read from the file. */
  functionBody(symbol: ElfSymbol): Buffer {
    const fd = openSync(this.path, 'r');
    try {
      return readFileRange(fd, Number(this.fileOffset(symbol.value)), Number(symbol.size));
    } finally {
      closeSync(fd);
    }
  }

  /** True for position-independent executables and shared objects (ET_DYN). */
  isPositionIndependent(): boolean {
    return this.header.readUInt16LE(16) === 3;
  }

  /**
   * The named, defined symbol `name`: .symtab first (when not stripped), then .dynsym. Its name
   * is searched for in each string table, then its offset there among the table's entries.
   */
  symbol(name: string): ElfSymbol | undefined {
    if (this.symbolIndex) return this.symbolIndex.get(name);
    if (!this.found.has(name)) this.found.set(name, this.findSymbol(name));
    return this.found.get(name);
  }

  /** All named symbols, .symtab first (when not stripped), then .dynsym. */
  symbols(): Map<string, ElfSymbol> {
    if (!this.symbolIndex) {
      this.symbolIndex = new Map();
      for (const table of this.symbolTables) {
        for (let at = 0; at + SYMBOL_SIZE <= table.entries.length; at += SYMBOL_SIZE) {
          const nameOffset = table.entries.readUInt32LE(at);
          if (nameOffset === 0 || table.entries.readUInt16LE(at + 6) === 0) continue; // unnamed or undefined (imported)
          const name = cString(table.strings, nameOffset);
          if (!this.symbolIndex.has(name)) this.symbolIndex.set(name, decodeSymbol(table.entries, at, name));
        }
      }
    }
    return this.symbolIndex;
  }

  /** USDT probes from .note.stapsdt (empty when the binary was built without dtrace). */
  usdtNotes(): UsdtNote[] {
    const notes: UsdtNote[] = [];
    for (const data of this.notes) {
      let at = 0;
      while (at + 12 <= data.length) {
        const nameSize = data.readUInt32LE(at);
        const descSize = data.readUInt32LE(at + 4);
        const type = data.readUInt32LE(at + 8);
        const nameAt = at + 12;
        const descAt = nameAt + align4(nameSize);
        if (type === 3 && cString(data, nameAt) === 'stapsdt') {
          // desc: pc, base, semaphore (3 x u64), then provider\0 name\0 args\0
          const pc = data.readBigUInt64LE(descAt);
          const provider = cString(data, descAt + 24);
          const name = cString(data, descAt + 24 + Buffer.byteLength(provider) + 1);
          notes.push({ provider, name, pc });
        }
        at = descAt + align4(descSize);
      }
    }
    return notes;
  }

  private findSymbol(name: string): ElfSymbol | undefined {
    const needle = Buffer.from(`${name}\0`, 'latin1');
    for (const table of this.symbolTables) {
      // A name may also end a longer one ("LWLockAcquire" ends "ConditionalLWLockAcquire"):
      // every place it ends a string is a possible st_name; the entry decides.
      for (let at = table.strings.indexOf(needle); at >= 0; at = table.strings.indexOf(needle, at + 1)) {
        const entry = entryNamed(table.entries, at);
        if (entry !== null) return decodeSymbol(table.entries, entry, name);
      }
    }
    return undefined;
  }

  private readSections(): Section[] {
    const shoff = Number(this.header.readBigUInt64LE(40));
    const shentsize = this.header.readUInt16LE(58);
    const shnum = this.header.readUInt16LE(60);
    const shstrndx = this.header.readUInt16LE(62);
    if (shoff === 0 || shnum === 0) return [];
    const table = this.readAt(shoff, shnum * shentsize);
    const raw = [];
    for (let i = 0; i < shnum; i++) {
      const at = i * shentsize;
      if (at + 64 > table.length) throw new Error(`${this.path}: truncated section header table`);
      raw.push({
        nameOffset: table.readUInt32LE(at),
        type: table.readUInt32LE(at + 4),
        offset: Number(table.readBigUInt64LE(at + 24)),
        size: Number(table.readBigUInt64LE(at + 32)),
        link: table.readUInt32LE(at + 40),
        entsize: Number(table.readBigUInt64LE(at + 56)),
      });
    }
    const namesSection = raw[shstrndx];
    const names = namesSection ? this.readAt(namesSection.offset, namesSection.size) : null;
    return raw.map((s) => ({ ...s, name: names ? cString(names, s.nameOffset) : '' }));
  }

  private readLoadSegments(): Array<{ vaddr: bigint; offset: bigint; filesz: bigint }> {
    const phoff = Number(this.header.readBigUInt64LE(32));
    const phentsize = this.header.readUInt16LE(54);
    const phnum = this.header.readUInt16LE(56);
    if (phoff === 0 || phnum === 0 || phentsize === 0) return []; // a relocatable object (.o)
    const table = this.readAt(phoff, phnum * phentsize);
    const segments = [];
    for (let at = 0; at + phentsize <= table.length; at += phentsize) {
      if (table.readUInt32LE(at) !== PT_LOAD) continue;
      segments.push({
        offset: table.readBigUInt64LE(at + 8),
        vaddr: table.readBigUInt64LE(at + 16),
        filesz: table.readBigUInt64LE(at + 32),
      });
    }
    return segments;
  }
}

/** The offset of the first defined entry of a symbol table whose st_name is `nameOffset`, or null. */
function entryNamed(entries: Buffer, nameOffset: number): number | null {
  const needle = Buffer.alloc(4);
  needle.writeUInt32LE(nameOffset);
  for (let at = entries.indexOf(needle); at >= 0; at = entries.indexOf(needle, at + 1)) {
    // Only an entry's first word is its st_name; the same bytes elsewhere are another field.
    if (at % SYMBOL_SIZE === 0 && entries.readUInt16LE(at + 6) !== 0) return at;
  }
  return null;
}

function decodeSymbol(entries: Buffer, at: number, name: string): ElfSymbol {
  return {
    name,
    type: entries[at + 4]! & 0xf,
    value: entries.readBigUInt64LE(at + 8),
    size: entries.readBigUInt64LE(at + 16),
  };
}

function cString(data: Buffer, at: number): string {
  const end = data.indexOf(0, at);
  return data.toString('latin1', at, end < 0 ? data.length : end);
}

function align4(n: number): number {
  return (n + 3) & ~3;
}
