/**
 * The stack budget check (scripts/bpf-stack-budget.mjs): the shipped object fits 512 bytes along
 * every call chain, and the reader's figures are exact on objects built to a known stack size.
 * No root and no kernel: the objects are read, never loaded (test/native/bpf-stack-budget.test.ts
 * loads the same tiny objects and compares with the verifier). Needs the build: the object, and
 * clang with libbpf's headers for the tiny ones.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatChain, MAX_BPF_STACK, readBpfFunctions, stackBudget } from '../../scripts/bpf-stack-budget.mjs';
import { compileStackChainObject } from '../support/stack-chain-object.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const OBJECT = join(ROOT, 'build', 'bpf', 'pgstats.bpf.o');
const SCRIPT = join(ROOT, 'scripts', 'bpf-stack-budget.mjs');

let tmp: string;
let overObject: string;
let fitObject: string;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'bpf-stack-budget-'));
  // 304 + 208 + 16 (8 rounded up) = 528, what the verifier refused for the collector's
  // on_sched_switch -> wait_events_add; 288 instead of 304 is exactly 512, the most it accepts.
  overObject = compileStackChainObject(tmp, { caller: 304, callee: 208, leaf: 8 });
  fitObject = compileStackChainObject(tmp, { caller: 288, callee: 208, leaf: 8 });
});

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function runCli(...args: string[]) {
  const run = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8' });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe('the shipped object', () => {
  it('fits every program deepest call chain in 512 bytes of stack', () => {
    expect(existsSync(OBJECT), `${OBJECT} is missing: run \`npm run build\``).toBe(true);
    const budgets = stackBudget(OBJECT);
    expect(budgets.map((b) => b.program)).toContain('on_sched_switch');
    const over = budgets.filter((b) => b.total > MAX_BPF_STACK).map((b) => `${b.program}: ${formatChain(b)}`);
    expect(over, `over ${MAX_BPF_STACK} bytes (kernels without a private stack refuse these):\n${over.join('\n')}`).toEqual([]);
  });

  it("counts libbpf's USDT helpers in .text as subprograms", () => {
    const functions = readBpfFunctions(readFileSync(OBJECT));
    const usdtArg = functions.find((f) => f.name === 'bpf_usdt_arg');
    expect(usdtArg).toMatchObject({ section: '.text', isProgram: false });
    expect(functions.filter((f) => f.calls.includes('bpf_usdt_arg')).every((f) => f.section === 'usdt')).toBe(true);
  });
});

describe('stackBudget on objects of known frames', () => {
  it('names the chain and its total, each frame rounded up to 16 bytes', () => {
    expect(stackBudget(overObject)).toEqual([
      {
        program: 'caller',
        section: 'socket',
        chain: [
          { name: 'caller', depth: 304, bytes: 304 },
          { name: 'callee', depth: 208, bytes: 208 },
          { name: 'leaf', depth: 8, bytes: 16 },
        ],
        total: 528,
      },
    ]);
    expect(formatChain(stackBudget(overObject)[0]!)).toBe('caller (304) -> callee (208) -> leaf (16) = 528');
    expect(stackBudget(fitObject)[0]!.total).toBe(512);
  });

  it('resolves the three call forms: global function, static from a program, static from .text', () => {
    const calls = Object.fromEntries(readBpfFunctions(readFileSync(overObject)).map((f) => [f.name, [...new Set(f.calls)]]));
    expect(calls).toEqual({ caller: ['callee', 'leaf'], callee: ['leaf'], leaf: [] });
  });

  it('refuses what is not a BPF object', () => {
    expect(() => stackBudget(Buffer.from('not an object'))).toThrow(/not an ELF file/);
  });
});

describe('the command', () => {
  it('exits 1 naming the chain over the limit, 0 when it fits', () => {
    const over = runCli(overObject);
    expect(over.status).toBe(1);
    expect(over.stdout).toBe('over caller: caller (304) -> callee (208) -> leaf (16) = 528\n');
    expect(over.stderr).toMatch(/1 program\(s\) need more than 512 bytes/);

    const fit = runCli(fitObject);
    expect(fit.status).toBe(0);
    expect(fit.stdout).toBe('');
  });

  it('takes another limit, and lists every program with --all', () => {
    expect(runCli('--limit', '528', overObject).status).toBe(0);
    const all = runCli('--all', fitObject);
    expect(all.status).toBe(0);
    expect(all.stdout).toBe('ok   caller: caller (288) -> callee (208) -> leaf (16) = 512\n');
  });

  it('exits 2 for a missing or unreadable object', () => {
    expect(runCli(join(tmp, 'missing.o')).status).toBe(2);
    const text = join(tmp, 'text.o');
    writeFileSync(text, 'not an object');
    const unreadable = runCli(text);
    expect(unreadable.status).toBe(2);
    expect(unreadable.stderr).toMatch(/not an ELF file/);
  });
});
