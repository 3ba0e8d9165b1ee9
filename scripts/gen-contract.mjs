#!/usr/bin/env node
// Generates src/bpf/contract.ts from the compiled BPF object, the way libbpf-tools generate a
// skeleton: TypeScript reaches programs, maps, globals, enums and record layouts by names the
// compiler checks, so a name or constant that drifts from bpf/ is a type error, not a runtime
// surprise.
//
//   node scripts/gen-contract.mjs build/bpf/pgstats.bpf.o bpf src/bpf/contract.ts
//   node scripts/gen-contract.mjs --check build/bpf/pgstats.bpf.o bpf src/bpf/contract.ts
//
// The output is committed, so a clone type-checks before anything is built; it is rewritten
// only when its text changes. --check (run by npm test) writes nothing and fails in one line
// when the file does not match the object, or when git has bpf/ as committed but not the file.
//
// Sources: the object's BTF (`bpftool btf dump -j`) for types, globals and maps, and its ELF
// symbol table (`llvm-objdump -t`) for which functions are programs (a program lives in its
// own section; library subprograms such as libbpf's USDT helpers live in .text). Only the
// structs and enums declared in bpf/*.h are emitted: the object's BTF also carries the kernel
// types its CO-RE relocations name.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const args = process.argv.slice(2);
const check = args[0] === '--check';
const [objectPath, bpfDir, outPath] = check ? args.slice(1) : args;
if (!objectPath || !bpfDir || !outPath) {
  console.error('usage: gen-contract.mjs [--check] OBJECT.bpf.o BPF_DIR OUT.ts');
  process.exit(2);
}
if (!existsSync(objectPath)) {
  console.error(`gen-contract: ${objectPath} does not exist: run \`npm run build\` first`);
  process.exit(2);
}

// bpftool prints enum values as 64-bit integers (sign-extended), past what a JSON number holds
// exactly: they are read as strings and kept as BigInt.
const dump = execFileSync('bpftool', ['btf', 'dump', 'file', objectPath, '-j'], { encoding: 'utf8', maxBuffer: 1 << 28 });
const types = JSON.parse(dump.replace(/"val":\s*(-?\d+)/g, '"val":"$1"')).types;
const byId = new Map(types.map((t) => [t.id, t]));

// Names declared in our own headers: `struct name {` and `enum name {`.
const declared = { struct: new Set(), enum: new Set() };
for (const file of readdirSync(bpfDir)
  .filter((f) => f.endsWith('.h'))
  .sort()) {
  const text = readFileSync(join(bpfDir, file), 'utf8');
  for (const m of text.matchAll(/^\s*(struct|enum)\s+(\w+)\s*\{/gm)) declared[m[1]].add(m[2]);
}

/** Follows typedefs and qualifiers to the type that has a layout. */
function resolve(id) {
  let t = byId.get(id);
  while (t && ['TYPEDEF', 'CONST', 'VOLATILE', 'RESTRICT', 'TYPE_TAG'].includes(t.kind)) t = byId.get(t.type_id);
  return t;
}

function sizeOf(t) {
  switch (t.kind) {
    case 'INT':
    case 'ENUM':
    case 'ENUM64':
    case 'STRUCT':
    case 'UNION':
      return t.size;
    case 'PTR':
      return 8;
    case 'ARRAY':
      return t.nr_elems * sizeOf(resolve(t.type_id));
    default:
      throw new Error(`no size for BTF ${t.kind} ${t.name}`);
  }
}

function isSigned(t) {
  if (t.kind === 'INT') return t.encoding === 'SIGNED';
  if (t.kind === 'ENUM' || t.kind === 'ENUM64')
    return t.encoding === 'SIGNED' || t.values.some((v) => BigInt(v.val) < 0n && t.encoding !== 'UNSIGNED');
  return false;
}

/** Flattened fields of a struct, nested members named 'outer.inner' as RecordLayout reads them. */
function fields(struct, prefix = '', base = 0, out = {}) {
  for (const m of struct.members) {
    const t = resolve(m.type_id);
    const offset = base + m.bits_offset / 8;
    const name = m.name ? `${prefix}${m.name}` : prefix.replace(/\.$/, '');
    if ((t.kind === 'STRUCT' || t.kind === 'UNION') && t.members.length) {
      fields(t, m.name ? `${name}.` : prefix, offset, out);
      continue;
    }
    const field = { offset, size: sizeOf(t) };
    if (t.kind === 'ARRAY') {
      const element = resolve(t.type_id);
      Object.assign(field, { count: t.nr_elems, elemSize: sizeOf(element) });
    } else {
      field.signed = isSigned(t);
      if (t.kind === 'ENUM' || t.kind === 'ENUM64') field.enum = t.name;
    }
    out[name] = field;
  }
  return out;
}

/** A map's key or value type as a name: a declared struct's name, else its size in bytes. */
function typeName(ptrId) {
  const target = resolve(resolve(ptrId).type_id);
  if (target.kind === 'STRUCT' && declared.struct.has(target.name)) return target.name;
  if (target.kind === 'ENUM' && declared.enum.has(target.name)) return `enum ${target.name}`;
  return `${sizeOf(target)} bytes`;
}

/** `__uint(name, N)` is encoded as a pointer to an array of N ints. */
function mapNumber(member) {
  const array = resolve(resolve(member.type_id).type_id);
  return array?.kind === 'ARRAY' ? array.nr_elems : null;
}

const sections = new Map(types.filter((t) => t.kind === 'DATASEC').map((t) => [t.name, t]));
// Function-local `static const` values also sit in .rodata; only globals are the contract.
const variables = (section) => (sections.get(section)?.vars ?? []).map((v) => byId.get(v.type_id)).filter((v) => v.linkage !== 'static');

const maps = {};
for (const v of variables('.maps')) {
  const def = resolve(v.type_id);
  const member = (name) => def.members.find((m) => m.name === name);
  const entry = {};
  if (member('key')) entry.key = typeName(member('key').type_id);
  if (member('value')) entry.value = typeName(member('value').type_id);
  const maxEntries = member('max_entries') && mapNumber(member('max_entries'));
  if (maxEntries) entry.maxEntries = maxEntries;
  maps[v.name] = entry;
}

const globals = (section) =>
  Object.fromEntries(
    variables(section).map((v) => {
      const t = resolve(v.type_id);
      return [v.name, { size: sizeOf(t), ...(t.kind === 'ENUM' ? { enum: t.name } : {}) }];
    }),
  );

const symbols = execFileSync('llvm-objdump', ['-t', objectPath], { encoding: 'utf8' });
const programs = [...symbols.matchAll(/^[0-9a-f]+ g\s+F (\S+)\s+[0-9a-f]+ (\w+)$/gm)]
  .filter((m) => m[1] !== '.text')
  .map((m) => [m[2], m[1]])
  .sort(([a], [b]) => a.localeCompare(b));

const enums = types
  .filter((t) => (t.kind === 'ENUM' || t.kind === 'ENUM64') && declared.enum.has(t.name))
  .sort((a, b) => a.name.localeCompare(b.name));
const structs = types.filter((t) => t.kind === 'STRUCT' && declared.struct.has(t.name)).sort((a, b) => a.name.localeCompare(b.name));

const pascal = (name) => name.replace(/(^|_)(\w)/g, (_, __, c) => c.toUpperCase());
/** A TypeScript literal, one line per object whose members are all plain values. */
function literal(value, indent = '') {
  const key = (k) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : `'${k}'`);
  const flat = (v) => typeof v !== 'object' || v === null;
  if (flat(value)) return typeof value === 'string' ? `'${value}'` : typeof value === 'bigint' ? `${value}n` : String(value);
  const entries = Object.entries(value);
  if (entries.every(([, v]) => flat(v))) return `{ ${entries.map(([k, v]) => `${key(k)}: ${literal(v)}`).join(', ')} }`;
  const inner = `${indent}  `;
  return `{\n${entries.map(([k, v]) => `${inner}${key(k)}: ${literal(v, inner)},`).join('\n')}\n${indent}}`;
}

const out = [
  `// Generated by scripts/gen-contract.mjs from ${objectPath} (its BTF and symbol table): do not edit.`,
  '// bpf/*.h is the one definition: `npm run build` regenerates this file; commit it with the bpf/ change.',
  '',
  "/** The object's programs and the ELF section each lives in (its attach type). */",
  `export const Programs = ${literal(Object.fromEntries(programs))} as const;`,
  'export type ProgramName = keyof typeof Programs;',
  '',
  "/** The object's maps: key and value type (a struct of bpf/*.h, or a size), and max_entries as compiled. */",
  `export const Maps = ${literal(maps)} as const;`,
  'export type MapName = keyof typeof Maps;',
  '',
  '/** `const volatile` globals, set between open and load. */',
  `export const Rodata = ${literal(globals('.rodata'))} as const;`,
  'export type RodataName = keyof typeof Rodata;',
  '',
  '/** Globals the programs read at run time (.bss), set by user space after load. */',
  `export const Bss = ${literal(globals('.bss'))} as const;`,
  'export type BssName = keyof typeof Bss;',
  '',
];
for (const e of enums) {
  out.push(`/** enum ${e.name} (bpf/). */`);
  const bits = e.size * 8;
  const value = (v) => {
    const exact = isSigned(e) ? BigInt.asIntN(bits, BigInt(v.val)) : BigInt.asUintN(bits, BigInt(v.val));
    return Number.isSafeInteger(Number(exact)) ? Number(exact) : exact;
  };
  out.push(`export const ${pascal(e.name)} = ${literal(Object.fromEntries(e.values.map((v) => [v.name, value(v)])))} as const;`);
  out.push('');
}
out.push('/** Record layouts of bpf/*.h: fields flattened as RecordLayout names them, offsets and sizes in bytes. */');
out.push(
  `export const Structs = ${literal(Object.fromEntries(structs.map((s) => [s.name, { size: s.size, fields: fields(s) }])))} as const;`,
);
out.push('export type StructName = keyof typeof Structs;');
out.push("export type FieldOf<S extends StructName> = keyof (typeof Structs)[S]['fields'] & string;");
out.push('');

const text = out.join('\n');
const current = existsSync(outPath) ? readFileSync(outPath, 'utf8') : null;
const fix = `run \`npm run build\` and commit ${outPath}`;
if (check) {
  if (current !== text) {
    console.error(`gen-contract: ${outPath} does not match ${objectPath}: ${fix}`);
    process.exit(1);
  }
  if (differsFromHead(outPath) && !differsFromHead(bpfDir, 'scripts/gen-contract.mjs')) {
    console.error(
      `gen-contract: ${outPath} differs from the committed one while ${bpfDir}/ does not (the build regenerated it): commit ${outPath}`,
    );
    process.exit(1);
  }
  process.exit(0);
}
// An unchanged contract keeps its mtime: nothing that depends on it is rebuilt for nothing.
if (current !== text) {
  writeFileSync(`${outPath}.tmp`, text);
  renameSync(`${outPath}.tmp`, outPath);
  if (current !== null) console.log(`gen-contract: ${outPath} changed: commit it with the change to ${bpfDir}/`);
}

/** Whether git sees uncommitted changes (untracked files too) under these paths; false outside a work tree. */
function differsFromHead(...paths) {
  try {
    return execFileSync('git', ['status', '--porcelain', '--', ...paths], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }) !== '';
  } catch {
    return false;
  }
}
