/**
 * The stack budget check (scripts/bpf-stack-budget.mjs) against the kernel's verifier (root): tiny
 * objects whose call chain is just under, at and over 512 bytes are loaded, and the verifier
 * accepts exactly those the check passes, refusing the others with the check's own total. A
 * socket filter has no private stack on any kernel, so the verifier applies the chain rule here
 * as on the strictest machine (on 6.18 a perf_event program gets one and loads at 528).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatChain, MAX_BPF_STACK, stackBudget } from '../../scripts/bpf-stack-budget.mjs';
import { type BpfNative, loadNative } from '../../src/native/bpf-native.js';
import { compileStackChainObject } from '../support/stack-chain-object.js';

let bpf: BpfNative;
let tmp: string;

beforeAll(() => {
  bpf = loadNative();
  tmp = mkdtempSync(join(tmpdir(), 'bpf-stack-budget-native-'));
});

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The verifier's "combined stack size of N calls is M" for the object, or null when it loads. */
function verifierRefusal(path: string): { calls: number; bytes: number } | null {
  const obj = new bpf.BpfObject(path);
  try {
    obj.load();
    return null;
  } catch (e) {
    const m = /combined stack size of (\d+) calls is (\d+)\. Too large/.exec((e as Error).message);
    if (!m) throw e;
    return { calls: Number(m[1]), bytes: Number(m[2]) };
  } finally {
    obj.close();
  }
}

describe('the stack budget against the verifier', () => {
  // The caller's frame rounds up to 288 or 304: chains of 512 and 528 bytes, at the limit and past it.
  it.each([280, 288, 296, 304])('caller frame of %i bytes: refused exactly when the check says so, at its total', (caller) => {
    const object = compileStackChainObject(tmp, { caller, callee: 208, leaf: 8 });
    const [budget] = stackBudget(object);
    expect(budget).toBeDefined();
    const refusal = verifierRefusal(object);
    if (budget!.total > MAX_BPF_STACK) expect(refusal, formatChain(budget!)).toEqual({ calls: budget!.chain.length, bytes: budget!.total });
    else expect(refusal, formatChain(budget!)).toBeNull();
  });
});
