import { readFileSync } from 'node:fs';

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

const SHT_SYMTAB = 2;
const SHT_NOTE = 7;
const SHT_DYNSYM = 11;
const PT_LOAD = 1;

/**
 * The parts of an ELF64 little-endian executable that target discovery needs: symbols (to
 * find Postgres globals such as MyBEEntry in every backend) and USDT notes (to know whether
 * the build has `--enable-dtrace` probes).
 *
 * @example
 * const elf = ElfFile.read('/usr/lib/postgresql/15/bin/postgres');
 * elf.symbol('MyBEEntry')?.value; // link-time address
 * elf.usdtNotes().some((n) => n.name === 'query__done');
 */
export class ElfFile {
  private readonly sections: Section[];
  private symbolIndex?: Map<string, ElfSymbol>;

  constructor(
    private readonly data: Buffer,
    readonly path = '<buffer>',
  ) {
    if (data.length < 64 || data.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${path} is not an ELF file`);
    if (data[4] !== 2 || data[5] !== 1) throw new Error(`${path} is not a 64-bit little-endian ELF file`);
    this.sections = this.readSections();
  }

  static read(path: string): ElfFile {
    return new ElfFile(readFileSync(path), path);
  }

  /** The lowest PT_LOAD virtual address, rounded to its page: the load bias reference. */
  firstLoadVaddr(): bigint {
    let lowest: bigint | null = null;
    for (const segment of this.loadSegments()) {
      const base = segment.vaddr - segment.offset;
      if (lowest === null || base < lowest) lowest = base;
    }
    return lowest ?? 0n;
  }

  private loadSegments(): Array<{ vaddr: bigint; offset: bigint; filesz: bigint }> {
    const phoff = Number(this.data.readBigUInt64LE(32));
    const phentsize = this.data.readUInt16LE(54);
    const phnum = this.data.readUInt16LE(56);
    const segments = [];
    for (let i = 0; i < phnum; i++) {
      const at = phoff + i * phentsize;
      if (this.data.readUInt32LE(at) !== PT_LOAD) continue;
      segments.push({
        offset: this.data.readBigUInt64LE(at + 8),
        vaddr: this.data.readBigUInt64LE(at + 16),
        filesz: this.data.readBigUInt64LE(at + 32),
      });
    }
    return segments;
  }

  /** The file offset of a link-time address (what uprobes attach by). */
  fileOffset(vaddr: bigint): bigint {
    for (const segment of this.loadSegments()) {
      if (vaddr >= segment.vaddr && vaddr < segment.vaddr + segment.filesz) return vaddr - segment.vaddr + segment.offset;
    }
    throw new Error(`${this.path}: address 0x${vaddr.toString(16)} is in no loaded segment`);
  }

  /** The named function symbol whose body contains `vaddr`, if any. */
  functionAt(vaddr: bigint): ElfSymbol | undefined {
    for (const symbol of this.symbols().values()) {
      if (symbol.type === 2 && vaddr >= symbol.value && vaddr < symbol.value + symbol.size) return symbol;
    }
    return undefined;
  }

  /** True for position-independent executables and shared objects (ET_DYN). */
  isPositionIndependent(): boolean {
    return this.data.readUInt16LE(16) === 3;
  }

  symbol(name: string): ElfSymbol | undefined {
    return this.symbols().get(name);
  }

  /** All named symbols, .symtab first (when not stripped), then .dynsym. */
  symbols(): Map<string, ElfSymbol> {
    if (!this.symbolIndex) {
      this.symbolIndex = new Map();
      for (const type of [SHT_SYMTAB, SHT_DYNSYM]) {
        for (const section of this.sections.filter((s) => s.type === type)) {
          const strings = this.sections[section.link];
          if (!strings) continue;
          for (let at = section.offset; at + 24 <= section.offset + section.size; at += 24) {
            const nameOffset = this.data.readUInt32LE(at);
            const info = this.data[at + 4]!;
            const shndx = this.data.readUInt16LE(at + 6);
            if (nameOffset === 0 || shndx === 0) continue; // unnamed or undefined (imported)
            const name = this.cString(strings.offset + nameOffset);
            if (this.symbolIndex.has(name)) continue;
            this.symbolIndex.set(name, {
              name,
              type: info & 0xf,
              value: this.data.readBigUInt64LE(at + 8),
              size: this.data.readBigUInt64LE(at + 16),
            });
          }
        }
      }
    }
    return this.symbolIndex;
  }

  /** USDT probes from .note.stapsdt (empty when the binary was built without dtrace). */
  usdtNotes(): UsdtNote[] {
    const notes: UsdtNote[] = [];
    for (const section of this.sections.filter((s) => s.type === SHT_NOTE && s.name === '.note.stapsdt')) {
      let at = section.offset;
      const end = section.offset + section.size;
      while (at + 12 <= end) {
        const nameSize = this.data.readUInt32LE(at);
        const descSize = this.data.readUInt32LE(at + 4);
        const type = this.data.readUInt32LE(at + 8);
        const nameAt = at + 12;
        const descAt = nameAt + align4(nameSize);
        if (type === 3 && this.cString(nameAt) === 'stapsdt') {
          // desc: pc, base, semaphore (3 x u64), then provider\0 name\0 args\0
          const pc = this.data.readBigUInt64LE(descAt);
          const provider = this.cString(descAt + 24);
          const name = this.cString(descAt + 24 + Buffer.byteLength(provider) + 1);
          notes.push({ provider, name, pc });
        }
        at = descAt + align4(descSize);
      }
    }
    return notes;
  }

  private readSections(): Section[] {
    const shoff = Number(this.data.readBigUInt64LE(40));
    const shentsize = this.data.readUInt16LE(58);
    const shnum = this.data.readUInt16LE(60);
    const shstrndx = this.data.readUInt16LE(62);
    if (shoff === 0 || shnum === 0) return [];
    const raw = [];
    for (let i = 0; i < shnum; i++) {
      const at = shoff + i * shentsize;
      if (at + 64 > this.data.length) throw new Error(`${this.path}: truncated section header table`);
      raw.push({
        nameOffset: this.data.readUInt32LE(at),
        type: this.data.readUInt32LE(at + 4),
        offset: Number(this.data.readBigUInt64LE(at + 24)),
        size: Number(this.data.readBigUInt64LE(at + 32)),
        link: this.data.readUInt32LE(at + 40),
        entsize: Number(this.data.readBigUInt64LE(at + 56)),
      });
    }
    const names = raw[shstrndx];
    return raw.map((s) => ({ ...s, name: names ? this.cString(names.offset + s.nameOffset) : '' }));
  }

  private cString(at: number): string {
    const end = this.data.indexOf(0, at);
    return this.data.toString('latin1', at, end < 0 ? this.data.length : end);
  }
}

function align4(n: number): number {
  return (n + 3) & ~3;
}
