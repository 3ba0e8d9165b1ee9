import { describe, expect, it } from 'vitest';
import { HistLayout, Structs } from '../../src/bpf/contract.js';
import {
  KERNEL_LAYOUT,
  LOG2_LAYOUT,
  layoutOfCounts,
  logLinearLayout,
  quantileUs,
  type HistogramLayout,
} from '../../src/collector/histogram-layout.js';
import { cumulativeBuckets, KERNEL_BUCKETS_PER_EXPORTED } from '../../src/exporters/prometheus/metric-names.js';

/*
 * The bucket math behind every percentile: the bound docs/percentiles.md states (a quantile is
 * within 10% of the exact value of its rank from 16 us on, 1 us below) proven bucket by bucket
 * over the whole range the kernel keeps, and checked on exact percentiles of samples.
 */

/** bpf/hist.bpf.h's hist_slot(), step by step on 64-bit integers (the branch-free search included). */
function kernelSlot(ns: bigint): number {
  const us = ns / 1000n;
  let topBits = us | (1n << BigInt(HistLayout.HIST_SUB_BITS));
  let top = 0n;
  for (const bits of [32n, 16n, 8n, 4n, 2n, 1n]) {
    const above = topBits > (1n << bits) - 1n ? 1n : 0n;
    const shift = above * bits;
    topBits >>= shift;
    top += shift;
  }
  const shift = top - BigInt(HistLayout.HIST_SUB_BITS);
  const slot = (shift << BigInt(HistLayout.HIST_SUB_BITS)) + (us >> shift);
  const slots = BigInt(Structs.hist.fields.slots.count!);
  return Number(slot < slots ? slot : slots - 1n);
}

/** Exact nearest-rank q-quantile: the value of rank ceil(q × n). */
function exactQuantile(sorted: readonly number[], q: number): number {
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

/** A small deterministic generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function histogram(layout: HistogramLayout, valuesUs: readonly number[]): number[] {
  const counts = new Array<number>(layout.slots).fill(0);
  for (const v of valuesUs) counts[layout.slotOf(v)]!++;
  return counts;
}

/** Integer microsecond samples of named distributions over 16 us .. ~1 hour. */
function distributions(): Array<{ name: string; values: number[] }> {
  const rnd = random(42);
  const normal = () => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
  const n = 5000;
  const make = (name: string, f: () => number) => ({ name, values: Array.from({ length: n }, () => Math.max(16, Math.round(f()))) });
  return [
    make('log-uniform 16 us .. 1 h', () => 16 * Math.exp(rnd() * Math.log(3.6e9 / 16))),
    make('lognormal around 2 ms, sigma 1', () => 2000 * Math.exp(normal())),
    make('lognormal around 300 us, sigma 0.2', () => 300 * Math.exp(0.2 * normal())),
    make('exponential, mean 5 ms', () => -5000 * Math.log(1 - rnd())),
    make('uniform 1 .. 2 ms', () => 1000 + 1000 * rnd()),
    make('bimodal 200 us / 80 ms', () => (rnd() < 0.9 ? 200 + 20 * normal() : 80_000 + 8000 * normal())),
    make('Pareto from 100 us, alpha 1.2', () => 100 / (1 - rnd()) ** (1 / 1.2)),
    // Nearly every observation at the very start or end of a power of two, the max elsewhere:
    // the worst cases for interpolation.
    make('98% at 8.192 ms, 2% at 100 ms', () => (rnd() < 0.98 ? 8192 : 100_000)),
    make('98% just below 16.384 ms, 2% at 100 ms', () => (rnd() < 0.98 ? 16_383 : 100_000)),
  ];
}

describe('the kernel layout (bpf/records.h)', () => {
  it('is 8 sub-buckets per power of two in 256 slots, and the object carries it', () => {
    expect(HistLayout.HIST_SUB_BITS).toBe(3);
    expect(KERNEL_LAYOUT.subBuckets).toBe(8);
    expect(KERNEL_LAYOUT.slots).toBe(256);
    expect(layoutOfCounts(256)).toBe(KERNEL_LAYOUT);
    expect(layoutOfCounts(32)).toBe(LOG2_LAYOUT);
    expect(() => layoutOfCounts(33)).toThrow(/33 slots has no known layout/);
  });

  it("puts every value where the kernel's branch-free arithmetic does, inside its slot's bounds", () => {
    const values: number[] = [];
    for (let us = 0; us <= 70_000; us++) values.push(us);
    for (let bit = 0; bit <= 40; bit++) for (const d of [-3, -1, 0, 1, 3]) values.push(Math.max(0, 2 ** bit + d));
    const rnd = random(7);
    for (let i = 0; i < 50_000; i++) values.push(Math.floor(2 ** (rnd() * 40)));
    const wrong: string[] = [];
    for (const us of values) {
      const slot = KERNEL_LAYOUT.slotOf(us);
      // The same number the BPF program computes from the duration in nanoseconds.
      const kernel = kernelSlot(BigInt(us) * 1000n + 999n);
      if (slot !== kernel) wrong.push(`${us} us: slot ${slot}, the kernel's ${kernel}`);
      if (us < KERNEL_LAYOUT.lowerUs(slot) || us >= KERNEL_LAYOUT.upperUs(slot)) wrong.push(`${us} us outside slot ${slot}`);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
    const checked = values.length;
    expect(checked).toBeGreaterThan(100_000);
  });

  it('has buckets 1 us wide below 16 us and at most 1/8 of their lower bound wide above, up to ~4.5 h', () => {
    for (let slot = 0; slot < KERNEL_LAYOUT.slots - 1; slot++) {
      const lower = KERNEL_LAYOUT.lowerUs(slot);
      const width = KERNEL_LAYOUT.upperUs(slot) - lower;
      expect(KERNEL_LAYOUT.lowerUs(slot + 1)).toBeGreaterThan(lower); // contiguous, in order
      if (lower < 16) expect(width).toBe(1);
      else expect(width / lower).toBeLessThanOrEqual(1 / 8);
    }
    expect(KERNEL_LAYOUT.lowerUs(255)).toBe(15 * 2 ** 30);
    expect(KERNEL_LAYOUT.upperUs(255)).toBe(Infinity);
    expect(KERNEL_LAYOUT.slotOf(2 ** 50)).toBe(255);
  });

  it('agrees with logLinearLayout for other widths, whose bound is 1/S', () => {
    for (const subBits of [2, 4]) {
      const layout = logLinearLayout(subBits, 64 << subBits);
      for (let us = 1; us < 1 << 20; us = Math.ceil(us * 1.01)) {
        const slot = layout.slotOf(us);
        expect(us).toBeGreaterThanOrEqual(layout.lowerUs(slot));
        expect(us).toBeLessThan(layout.upperUs(slot));
        if (layout.lowerUs(slot) >= 2 << subBits)
          expect((layout.upperUs(slot) - layout.lowerUs(slot)) / layout.lowerUs(slot)).toBeLessThanOrEqual(1 / 2 ** subBits);
      }
    }
  });
});

describe('quantileUs', () => {
  it('is at most 10% off any value its bucket can hold, for every bucket from 16 us to ~4.5 h (the proof, bucket by bucket)', () => {
    const wrong: string[] = [];
    // The last bucket (from ~4.5 h on) has no width to bound: only its maximum is exact.
    for (let slot = 0; slot < KERNEL_LAYOUT.slots - 1; slot++) {
      const lower = KERNEL_LAYOUT.lowerUs(slot);
      if (lower < 16) continue;
      const maxUs = 2 ** 60;
      const upper = KERNEL_LAYOUT.upperUs(slot);
      const counts = new Array<number>(KERNEL_LAYOUT.slots).fill(0);
      counts[slot] = 1000;
      // Every rank inside the bucket: the estimate runs from its lower to its upper bound.
      for (const q of [0.0001, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 0.99, 1]) {
        const estimate = quantileUs(KERNEL_LAYOUT, counts, q, maxUs)!;
        // The truth is some integer in [lower, upper): the error is largest at either end.
        for (const truth of [lower, upper - 1]) {
          if (Math.abs(estimate - truth) / truth > 0.1 + 1e-12) wrong.push(`slot ${slot} [${lower}, ${upper}): ${estimate} for ${truth}`);
        }
      }
    }
    expect(wrong.slice(0, 5)).toEqual([]);
    // Interpolated plainly, the first bucket of each power of two misses by up to 1/8.
    const counts = new Array<number>(KERNEL_LAYOUT.slots).fill(0);
    counts[KERNEL_LAYOUT.slotOf(8192)] = 1000;
    expect(quantileUs(KERNEL_LAYOUT, counts, 1, 2 ** 60, 0)! / 8192 - 1).toBeCloseTo(1 / 8, 9);
    expect(quantileUs(KERNEL_LAYOUT, counts, 1, 2 ** 60)! / 8192 - 1).toBeCloseTo(0.1, 9);
  });

  it('reads p50, p95 and p99 at most 10% off the exact nearest-rank values, where log2 buckets are not', () => {
    let worstLog2 = 0;
    for (const { name, values } of distributions()) {
      const sorted = [...values].sort((a, b) => a - b);
      const max = sorted.at(-1)!;
      const counts = histogram(KERNEL_LAYOUT, values);
      const log2Counts = histogram(LOG2_LAYOUT, values);
      for (const q of [0.5, 0.95, 0.99]) {
        const exact = exactQuantile(sorted, q);
        const estimate = quantileUs(KERNEL_LAYOUT, counts, q, max)!;
        expect(Math.abs(estimate - exact) / exact, `${name}, p${q * 100}: ${estimate} us for ${exact} us`).toBeLessThanOrEqual(0.1 + 1e-12);
        worstLog2 = Math.max(worstLog2, Math.abs(quantileUs(LOG2_LAYOUT, log2Counts, q, max)! - exact) / exact);
      }
    }
    // The same samples in the old layout: the check above is one log2 buckets fail.
    expect(worstLog2).toBeGreaterThan(0.25);
  });

  it('never reads above the exact maximum, and is null for an empty histogram or q outside 0..1', () => {
    const counts = histogram(KERNEL_LAYOUT, [100, 100, 5000]);
    expect(quantileUs(KERNEL_LAYOUT, counts, 1, 5000)).toBe(5000);
    expect(quantileUs(KERNEL_LAYOUT, counts, 0.99, 5001)).toBeLessThanOrEqual(5001);
    expect(quantileUs(KERNEL_LAYOUT, new Array(256).fill(0), 0.5, 0)).toBeNull();
    expect(quantileUs(KERNEL_LAYOUT, counts, 1.5, 5000)).toBeNull();
    // The last slot has no upper bound: the maximum closes it.
    const huge = histogram(KERNEL_LAYOUT, [2 ** 36, 2 ** 36]);
    expect(quantileUs(KERNEL_LAYOUT, huge, 0.5, 2 ** 36)).toBeGreaterThanOrEqual(KERNEL_LAYOUT.lowerUs(255));
    expect(quantileUs(KERNEL_LAYOUT, huge, 0.5, 2 ** 36)).toBeLessThanOrEqual(2 ** 36);
  });
});

describe('Prometheus buckets', () => {
  it('export every other kernel bound, 4 per power of two, cumulative, in seconds', () => {
    expect(KERNEL_BUCKETS_PER_EXPORTED).toBe(2);
    const counts = histogram(KERNEL_LAYOUT, [0, 1, 3, 15, 16, 17, 18, 1000, 2 ** 40]);
    const buckets = cumulativeBuckets(counts);
    expect(buckets).toHaveLength(127);
    expect(buckets.slice(0, 3)).toEqual([
      { le: 2e-6, count: 2 },
      { le: 4e-6, count: 3 },
      { le: 6e-6, count: 3 },
    ]);
    // 16, 17 and 18 us share the bucket from 16 to 20 us (kernel slots [16, 18) and [18, 20)).
    expect(buckets.find((b) => b.le === 16e-6)?.count).toBe(4);
    expect(buckets.find((b) => b.le === 20e-6)?.count).toBe(7);
    expect(buckets.some((b) => b.le === 18e-6)).toBe(false);
    // Bounds grow by at most 1/4 per bucket above 16 us; the 2^40 us observation only in +Inf.
    for (let i = 1; i < buckets.length; i++) {
      expect(buckets[i]!.le).toBeGreaterThan(buckets[i - 1]!.le);
      if (buckets[i - 1]!.le >= 16e-6) expect(buckets[i]!.le / buckets[i - 1]!.le).toBeLessThanOrEqual(1.25 + 1e-12);
    }
    expect(buckets.at(-1)!.count).toBe(8);
  });
});
