import { HistLayout, Structs } from '../bpf/contract.js';

/**
 * Where each slot of a histogram begins and ends, in microseconds, and the percentile read
 * from one. Two layouts exist:
 * - the kernel's (bpf/records.h, `struct hist`): log-linear, 2^HIST_SUB_BITS sub-buckets per
 *   power of two; slots 0..2S-1 are 1 us wide, then slot (g << bits) + m (g >= 1) holds
 *   [(S + m) << (g - 1), (S + m + 1) << (g - 1)) us, S = 2^bits;
 * - log2, the layout of rows written before migration 1764600000000 (kept readable in
 *   bpf_stats.query_histograms_log2): slot i holds [2^i, 2^(i+1)) us, slot 0 from 0.
 * The last slot of either also takes everything above its lower bound (upper bound Infinity).
 * sql/40-latency-llc.sql does the same arithmetic in SQL.
 */
export interface HistogramLayout {
  readonly name: 'log_linear' | 'log2';
  readonly slots: number;
  /** Sub-buckets per power of two (1 for log2). */
  readonly subBuckets: number;
  /** The slot an observation of `us` microseconds goes to (as the kernel computes it). */
  slotOf(us: number): number;
  /** The slot's lower bound, in microseconds (inclusive). */
  lowerUs(slot: number): number;
  /** The slot's upper bound, in microseconds (exclusive); Infinity for the last slot. */
  upperUs(slot: number): number;
}

/** A log-linear layout of 2^subBits sub-buckets per power of two and `slots` slots. */
export function logLinearLayout(subBits: number, slots: number): HistogramLayout {
  const sub = 2 ** subBits;
  const lowerUs = (slot: number): number => {
    const group = Math.floor(slot / sub);
    return group === 0 ? slot : (sub + (slot % sub)) * 2 ** (group - 1);
  };
  return {
    name: 'log_linear',
    slots,
    subBuckets: sub,
    slotOf(us) {
      const value = Math.max(0, Math.floor(us));
      const topBit = highestBit(Math.max(value, sub));
      const shift = topBit - subBits;
      const slot = shift * sub + Math.floor(value / 2 ** shift);
      return Math.min(slot, slots - 1);
    },
    lowerUs,
    upperUs: (slot) => (slot >= slots - 1 ? Infinity : lowerUs(slot + 1)),
  };
}

/** The highest set bit of a positive integer below 2^64 (exact, unlike Math.log2 near powers of two). */
function highestBit(value: number): number {
  const high = Math.floor(value / 2 ** 32);
  return high > 0 ? 63 - Math.clz32(high) : 31 - Math.clz32(value);
}

/** The log2 layout of rows written before migration 1764600000000 (32 slots). */
export const LOG2_LAYOUT: HistogramLayout = {
  name: 'log2',
  slots: 32,
  subBuckets: 1,
  slotOf: (us) => Math.min(31, us < 2 ? 0 : highestBit(Math.floor(us))),
  lowerUs: (slot) => (slot === 0 ? 0 : 2 ** slot),
  upperUs: (slot) => (slot >= 31 ? Infinity : 2 ** (slot + 1)),
};

/** The layout of the kernel's histograms and of bpf_stats.query_histograms.counts. */
export const KERNEL_LAYOUT: HistogramLayout = logLinearLayout(HistLayout.HIST_SUB_BITS, Structs.hist.fields.slots.count ?? 0);

/** The layout of a stored counts array, by its length (the two layouts differ in length). */
export function layoutOfCounts(length: number): HistogramLayout {
  if (length === KERNEL_LAYOUT.slots) return KERNEL_LAYOUT;
  if (length === LOG2_LAYOUT.slots) return LOG2_LAYOUT;
  throw new Error(`a histogram of ${length} slots has no known layout (${KERNEL_LAYOUT.slots}: log-linear, ${LOG2_LAYOUT.slots}: log2)`);
}

/**
 * The relative error a quantile is kept within where its bucket allows it: bpf_stats.hist_quantile
 * keeps the interpolated value inside [upper × (1 - e), lower × (1 + e)] of its bucket, the points
 * within e of every value the bucket can hold. For the kernel's buckets (at most 1/8 of their
 * lower bound wide from 16 us on) that range is never empty, so the quantile is within 10% of
 * the exact value of its rank; a bucket too wide for it (log2, unless the max closes it early;
 * some of the 1 us buckets below 16 us) is interpolated across, unclamped.
 */
export const KEEP_WITHIN = 0.1;

/**
 * The q-quantile (0..1) in microseconds of a histogram, as bpf_stats.hist_quantile computes it:
 * the first slot whose cumulative count reaches q × total holds it (so does the exact value of
 * rank ceil(q × total)); inside the slot it is interpolated linearly between the slot's bounds
 * (the exact maximum maxUs closing the slot that holds it), then kept within `keepWithin` of
 * every value of the slot where that is possible (KEEP_WITHIN; 0: plain interpolation).
 * null for an empty histogram or q outside 0..1.
 *
 * @example
 * quantileUs(KERNEL_LAYOUT, counts, 0.99, 12_345);
 */
export function quantileUs(
  layout: HistogramLayout,
  counts: readonly number[],
  q: number,
  maxUs: number,
  keepWithin = KEEP_WITHIN,
): number | null {
  if (!(q >= 0 && q <= 1)) return null;
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let cumulative = 0;
  for (let slot = 0; slot < counts.length; slot++) {
    const c = counts[slot]!;
    cumulative += c;
    if (c > 0 && cumulative >= rank) {
      const lower = layout.lowerUs(slot);
      const upper = Math.min(layout.upperUs(slot), Math.max(maxUs, lower));
      const interpolated = lower + ((upper - lower) * (rank - (cumulative - c))) / c;
      const [from, to] = [upper * (1 - keepWithin), lower * (1 + keepWithin)];
      const kept = from <= to ? Math.min(to, Math.max(from, interpolated)) : interpolated;
      return Math.min(maxUs, kept);
    }
  }
  return null;
}
