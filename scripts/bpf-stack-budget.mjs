#!/usr/bin/env node
// The stack budget of a compiled BPF object, checked before any kernel sees it. The verifier
// refuses a program whose deepest bpf-to-bpf call chain needs more than 512 bytes of stack, each
// frame's depth rounded up to 16 bytes (round_up_stack_depth() under the JIT) and the frames
// summed along the chain (check_max_stack_depth()). Kernels and CPUs with a private stack for
// tracing programs accept more, which is how a refused object can pass on the machine it was
// written on: this check holds every object to the rule the strictest of them applies.
//
//   node scripts/bpf-stack-budget.mjs [--limit 512] [--all] OBJECT.o
//
// Prints one line per program over the limit, naming its chain, and exits 1 when there is one
// (2 when the object cannot be read); --all prints every program's deepest chain.
//
// The ELF is read here rather than through llvm-objdump so that the check runs wherever node
// does. A frame's depth is the deepest byte below r10 its code addresses: loads and stores
// through r10, and pointers derived from it (`rX = r10; rX += -N`, the pair LLVM emits for the
// address of a stack slot, which helpers then read or write from rX upwards). That is an upper
// bound of the verifier's figure, which counts only the accesses on paths it explores: code
// that a `const volatile` setting makes dead still counts here (so every setting is covered).
// The verifier names the first chain over the limit it walks into, in instruction order; this
// names the deepest, so the two can name different chains of one refused program.
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** MAX_BPF_STACK in include/linux/filter.h. */
export const MAX_BPF_STACK = 512;

const SHT_SYMTAB = 2;
const SHT_REL = 9;
const SHF_EXECINSTR = 0x4;
const STT_FUNC = 2;
const STT_SECTION = 3;
const EM_BPF = 247;

const INSN_BYTES = 8;
const FRAME_POINTER = 10;
const BPF_PSEUDO_CALL = 1;
const BPF_PSEUDO_FUNC = 4;
const OPCODE_LD_IMM64 = 0x18;
const OPCODE_CALL = 0x85;
const OPCODE_MOV64_REG = 0xbf;
const OPCODE_ADD64_IMM = 0x07;
const OPCODE_SUB64_IMM = 0x17;
const CLASS_LDX = 1;
const CLASS_ST = 2;
const CLASS_STX = 3;
const CLASS_ALU = 4;
const CLASS_ALU64 = 7;
const CLASS_LD = 0;
const MODE_MEM = 0x60;
const MODE_MEMSX = 0x80;
const MODE_ATOMIC = 0xc0;

/** A frame as the JIT sizes it (round_up_stack_depth()). */
export const frameBytes = (depth) => Math.ceil(depth / 16) * 16;

/**
 * The functions of a BPF ELF object: name, section, whether it is a program (a function in a
 * section of its own; subprograms, ours and libbpf's USDT helpers, live in .text), its stack
 * depth and the functions it calls (bpf-to-bpf calls, and callbacks it passes by address, which
 * the verifier counts on top of the caller the same way).
 * @param {Uint8Array} bytes
 */
export function readBpfFunctions(bytes) {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < 64 || buf.readUInt32BE(0) !== 0x7f454c46) throw new Error('not an ELF file');
  if (buf[4] !== 2 || buf[5] !== 1) throw new Error('not a 64-bit little-endian ELF (build with -target bpf on x86 or arm64)');
  if (buf.readUInt16LE(18) !== EM_BPF) throw new Error('not a BPF object (e_machine is not EM_BPF)');

  const shoff = Number(buf.readBigUInt64LE(0x28));
  const shentsize = buf.readUInt16LE(0x3a);
  const shnum = buf.readUInt16LE(0x3c);
  const shstrndx = buf.readUInt16LE(0x3e);
  const sections = [];
  for (let i = 0; i < shnum; i++) {
    const at = shoff + i * shentsize;
    if (at + 64 > buf.length) throw new Error('truncated section header table');
    sections.push({
      index: i,
      nameOffset: buf.readUInt32LE(at),
      type: buf.readUInt32LE(at + 4),
      flags: Number(buf.readBigUInt64LE(at + 8)),
      offset: Number(buf.readBigUInt64LE(at + 24)),
      size: Number(buf.readBigUInt64LE(at + 32)),
      link: buf.readUInt32LE(at + 40),
      info: buf.readUInt32LE(at + 44),
    });
  }
  const contents = (s) => {
    if (s.offset + s.size > buf.length) throw new Error(`section ${s.index} runs past the end of the file`);
    return buf.subarray(s.offset, s.offset + s.size);
  };
  const cString = (table, offset) => {
    const end = table.indexOf(0, offset);
    return table.toString('latin1', offset, end < 0 ? table.length : end);
  };
  const sectionNames = contents(sections[shstrndx] ?? sections[0]);
  for (const s of sections) s.name = cString(sectionNames, s.nameOffset);

  const symtab = sections.find((s) => s.type === SHT_SYMTAB);
  if (!symtab) throw new Error('no symbol table (was the object stripped of more than -g?)');
  const symbolBytes = contents(symtab);
  const names = contents(sections[symtab.link]);
  const symbols = [];
  for (let at = 0; at + 24 <= symbolBytes.length; at += 24) {
    symbols.push({
      name: cString(names, symbolBytes.readUInt32LE(at)),
      type: symbolBytes[at + 4] & 0xf,
      section: symbolBytes.readUInt16LE(at + 6),
      value: Number(symbolBytes.readBigUInt64LE(at + 8)),
      size: Number(symbolBytes.readBigUInt64LE(at + 16)),
    });
  }

  // Relocations of each executable section, by the byte offset of the instruction they patch.
  const relocations = new Map();
  for (const rel of sections.filter((s) => s.type === SHT_REL)) {
    const bySite = new Map();
    const data = contents(rel);
    for (let at = 0; at + 16 <= data.length; at += 16) {
      const symbol = symbols[Number(data.readBigUInt64LE(at + 8) >> 32n)];
      if (symbol) bySite.set(Number(data.readBigUInt64LE(at)), symbol);
    }
    relocations.set(rel.info, bySite);
  }

  const functions = [];
  for (const section of sections.filter((s) => s.flags & SHF_EXECINSTR)) {
    const code = contents(section);
    const starts = symbols
      .filter((sym) => sym.type === STT_FUNC && sym.section === section.index)
      .sort((a, b) => a.value - b.value)
      .filter((sym, i, all) => i === 0 || sym.value !== all[i - 1].value);
    starts.forEach((sym, i) => {
      // A symbol without a size (hand-written assembly) runs to the next one.
      const end = sym.size > 0 ? sym.value + sym.size : (starts[i + 1]?.value ?? code.length);
      functions.push({
        name: sym.name,
        section: section.name,
        sectionIndex: section.index,
        start: sym.value,
        end,
        isProgram: section.name !== '.text',
        ...scanFrame(code, section, sym.value, end, relocations.get(section.index) ?? new Map()),
      });
    });
  }

  // Call sites name a section and a byte offset; resolve them to the function starting there.
  const byStart = new Map(functions.map((f) => [`${f.sectionIndex}:${f.start}`, f]));
  for (const f of functions) {
    f.calls = f.callSites.map((site) => {
      const callee = byStart.get(`${site.sectionIndex}:${site.offset}`);
      if (!callee) {
        const where = sections[site.sectionIndex]?.name ?? `section ${site.sectionIndex}`;
        throw new Error(`${f.name}: call at byte ${site.from} targets ${where}+${site.offset}, where no function starts`);
      }
      return callee.name;
    });
    delete f.callSites;
  }
  return functions;
}

/** One function's stack depth and call sites, from its instructions. */
function scanFrame(code, section, start, end, relocationsBySite) {
  let depth = 0;
  const callSites = [];
  // Registers that hold r10 + offset, as far as a straight read of the code tells.
  const derived = new Map();
  const touch = (offset) => {
    if (offset < 0 && -offset > depth) depth = -offset;
  };
  const access = (base, off) => {
    if (base === FRAME_POINTER) touch(off);
    else if (derived.has(base)) touch(derived.get(base) + off);
  };

  for (let at = start; at + INSN_BYTES <= end; at += INSN_BYTES) {
    const opcode = code[at];
    const dst = code[at + 1] & 0xf;
    const src = code[at + 1] >> 4;
    const off = code.readInt16LE(at + 2);
    const imm = code.readInt32LE(at + 4);
    const opClass = opcode & 0x7;
    const mode = opcode & 0xe0;

    if (opcode === OPCODE_CALL && src === BPF_PSEUDO_CALL) {
      const symbol = relocationsBySite.get(at);
      // libbpf's rule (bpf_object__reloc_code): with a relocation, the callee is at the symbol's
      // offset + imm + 1 instructions in the symbol's section (a global function: its own symbol,
      // imm = -1; a static one: the section symbol, imm = its index in the section); without
      // one, imm is relative to the call, within the caller's section.
      if (symbol) callSites.push({ from: at, sectionIndex: symbol.section, offset: symbol.value + (imm + 1) * INSN_BYTES });
      else callSites.push({ from: at, sectionIndex: section.index, offset: at + (imm + 1) * INSN_BYTES });
    }
    if (opcode === OPCODE_LD_IMM64 && src === BPF_PSEUDO_FUNC) {
      // A callback's address (bpf_loop and the like): the verifier stacks its frame on the
      // caller's. The relocation names the symbol; imm adds the byte offset (libbpf's
      // RELO_SUBPROG_ADDR).
      const symbol = relocationsBySite.get(at);
      if (symbol && (symbol.type === STT_FUNC || symbol.type === STT_SECTION))
        callSites.push({ from: at, sectionIndex: symbol.section, offset: symbol.value + imm });
    }

    switch (opClass) {
      case CLASS_LDX:
        if (mode === MODE_MEM || mode === MODE_MEMSX) access(src, off);
        derived.delete(dst);
        break;
      case CLASS_ST:
        if (mode === MODE_MEM) access(dst, off);
        break;
      case CLASS_STX:
        if (mode === MODE_MEM || mode === MODE_ATOMIC) access(dst, off);
        // Atomics with BPF_FETCH write the old value into src (cmpxchg into r0).
        if (mode === MODE_ATOMIC) {
          derived.delete(src);
          derived.delete(0);
        }
        break;
      case CLASS_ALU64:
        if (opcode === OPCODE_MOV64_REG && off === 0) {
          if (src === FRAME_POINTER) derived.set(dst, 0);
          else if (derived.has(src)) derived.set(dst, derived.get(src));
          else derived.delete(dst);
        } else if ((opcode === OPCODE_ADD64_IMM || opcode === OPCODE_SUB64_IMM) && derived.has(dst)) {
          const offset = derived.get(dst) + (opcode === OPCODE_ADD64_IMM ? imm : -imm);
          derived.set(dst, offset);
          // Helpers read and write a stack buffer upwards from the pointer they are passed.
          touch(offset);
        } else derived.delete(dst);
        break;
      case CLASS_ALU:
        derived.delete(dst);
        break;
      case CLASS_LD:
        derived.delete(opcode === OPCODE_LD_IMM64 ? dst : 0);
        break;
      default:
        // A call clobbers r0-r5.
        if (opcode === OPCODE_CALL) for (let r = 0; r <= 5; r++) derived.delete(r);
    }
    if (opcode === OPCODE_LD_IMM64) at += INSN_BYTES;
  }
  // The verifier grows a frame by 8-byte slots (grow_stack_state()): a 4-byte slot at r10-12 is 16.
  return { depth: Math.ceil(depth / 8) * 8, callSites };
}

/**
 * Every program's deepest call chain, each frame as the JIT sizes it, deepest total first.
 * @param {string | Uint8Array} object a path or the object's bytes
 */
export function stackBudget(object) {
  const functions = readBpfFunctions(typeof object === 'string' ? readFileSync(object) : object);
  const byName = new Map(functions.map((f) => [f.name, f]));
  const deepest = new Map();
  const chainFrom = (f, path) => {
    const known = deepest.get(f.name);
    if (known) return known;
    if (path.includes(f.name)) throw new Error(`recursive call: ${[...path, f.name].join(' -> ')}`);
    let best = { chain: [], total: 0 };
    for (const callee of new Set(f.calls)) {
      const below = chainFrom(byName.get(callee), [...path, f.name]);
      if (below.total > best.total || best.chain.length === 0) best = below;
    }
    const bytes = frameBytes(f.depth);
    const result = { chain: [{ name: f.name, depth: f.depth, bytes }, ...best.chain], total: bytes + best.total };
    deepest.set(f.name, result);
    return result;
  };
  return functions
    .filter((f) => f.isProgram)
    .map((f) => ({ program: f.name, section: f.section, ...chainFrom(f, []) }))
    .sort((a, b) => b.total - a.total || a.program.localeCompare(b.program));
}

/** `caller (304) -> callee (208) -> leaf (16) = 528` */
export const formatChain = (budget) => `${budget.chain.map((frame) => `${frame.name} (${frame.bytes})`).join(' -> ')} = ${budget.total}`;

function main(args) {
  let limit = MAX_BPF_STACK;
  let all = false;
  const paths = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--all') all = true;
    else if (args[i] === '--limit') limit = Number(args[++i]);
    else paths.push(args[i]);
  }
  if (paths.length !== 1 || !Number.isInteger(limit) || limit <= 0) {
    console.error('usage: bpf-stack-budget.mjs [--limit 512] [--all] OBJECT.o');
    return 2;
  }
  let budgets;
  try {
    budgets = stackBudget(paths[0]);
  } catch (e) {
    console.error(`bpf-stack-budget: ${paths[0]}: ${e.message}`);
    return 2;
  }
  const over = budgets.filter((b) => b.total > limit);
  for (const b of all ? budgets : over) console.log(`${b.total > limit ? 'over' : 'ok  '} ${b.program}: ${formatChain(b)}`);
  if (over.length > 0) {
    console.error(
      `bpf-stack-budget: ${paths[0]}: ${over.length} program(s) need more than ${limit} bytes of stack along a call chain; ` +
        'kernels without a private stack refuse them ("combined stack size ... Too large"): keep large locals in a per-CPU map',
    );
    return 1;
  }
  return 0;
}

// Run as a command, not when a test imports it.
const invokedPath = process.argv[1];
if (invokedPath && existsSync(invokedPath) && realpathSync(invokedPath) === fileURLToPath(import.meta.url))
  process.exitCode = main(process.argv.slice(2));
