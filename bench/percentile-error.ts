/**
 * How far p50, p95 and p99 read from a histogram are from the exact values, by bucket layout,
 * beside what each layout costs per key: the measurement behind the kernel's 8 sub-buckets per
 * power of two (docs/percentiles.md). Pure arithmetic, no root, no cluster:
 *
 *   node dist/bench/percentile-error.js [--samples 20000] [--seeds 5]
 *
 * For each layout (log2 as before; log-linear with 4, 8 and 16 sub-buckets covering the same
 * range; the kernel's 8 exported to Prometheus 4 per power of two) and each distribution
 * (integer microseconds, as the kernel sees them), the samples go into the layout's buckets
 * and quantileUs() (what bpf_stats.hist_quantile computes) is compared with the exact
 * nearest-rank value. Bytes per key are those of `struct hist` per CPU (slots × 8 + 16); keys at
 * 32 MiB is histogramCapacity()'s budget before its 1,024..8,192 clamp.
 */
import {
  KEEP_WITHIN,
  KERNEL_LAYOUT,
  LOG2_LAYOUT,
  logLinearLayout,
  quantileUs,
  type HistogramLayout,
} from '../src/collector/histogram-layout.js';
import { KERNEL_BUCKETS_PER_EXPORTED } from '../src/exporters/prometheus/metric-names.js';
import { median } from './report.js';

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? Number(process.argv[at + 1]) : fallback;
}

function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Distribution = { name: string; draw: (rnd: () => number) => number };

const normal = (rnd: () => number) => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
const DISTRIBUTIONS: Distribution[] = [
  { name: 'log-uniform 16 us .. 1 h', draw: (r) => 16 * Math.exp(r() * Math.log(3.6e9 / 16)) },
  { name: 'lognormal 2 ms, sigma 1', draw: (r) => 2000 * Math.exp(normal(r)) },
  { name: 'lognormal 300 us, sigma 0.2', draw: (r) => 300 * Math.exp(0.2 * normal(r)) },
  { name: 'exponential, mean 5 ms', draw: (r) => -5000 * Math.log(1 - r()) },
  { name: 'uniform 1 .. 2 ms', draw: (r) => 1000 + 1000 * r() },
  { name: 'bimodal 200 us / 80 ms', draw: (r) => (r() < 0.9 ? 200 + 20 * normal(r) : 80_000 + 8000 * normal(r)) },
  { name: 'Pareto from 100 us, alpha 1.2', draw: (r) => 100 / (1 - r()) ** (1 / 1.2) },
  { name: 'pg_sleep(10 ms) + jitter', draw: (r) => 10_060 + 80 * r() },
  // Nearly all at the very start of a power of two, the max elsewhere: the proven bound's worst case.
  { name: '98% at 8.192 ms, 2% at 100 ms', draw: (r) => (r() < 0.98 ? 8192 : 100_000) },
];

/** The kernel's layout read through Prometheus' coarser buckets (every KERNEL_BUCKETS_PER_EXPORTED-th bound). */
const EXPORTED: HistogramLayout = {
  name: 'log_linear',
  slots: Math.ceil(KERNEL_LAYOUT.slots / KERNEL_BUCKETS_PER_EXPORTED),
  subBuckets: KERNEL_LAYOUT.subBuckets / KERNEL_BUCKETS_PER_EXPORTED,
  slotOf: (us) => Math.floor(KERNEL_LAYOUT.slotOf(us) / KERNEL_BUCKETS_PER_EXPORTED),
  lowerUs: (slot) => KERNEL_LAYOUT.lowerUs(slot * KERNEL_BUCKETS_PER_EXPORTED),
  upperUs: (slot) => KERNEL_LAYOUT.upperUs(slot * KERNEL_BUCKETS_PER_EXPORTED + KERNEL_BUCKETS_PER_EXPORTED - 1),
};

/** keepWithin: quantileUs' clamp (KEEP_WITHIN, as bpf_stats.hist_quantile), 0 for plain linear interpolation (as Prometheus' histogram_quantile). */
const LAYOUTS: Array<{ name: string; layout: HistogramLayout; keepWithin: number; bound: string; kernel: boolean }> = [
  { name: 'log2 (before)', layout: LOG2_LAYOUT, keepWithin: 0, bound: '100%', kernel: true },
  { name: 'log-linear, 4 per power of two', layout: logLinearLayout(2, 132), keepWithin: 0, bound: '25%', kernel: true },
  { name: 'log-linear, 8 per power of two, plain interpolation', layout: KERNEL_LAYOUT, keepWithin: 0, bound: '12.5%', kernel: true },
  {
    name: '**log-linear, 8 per power of two, kept within 10% (kernel + hist_quantile)**',
    layout: KERNEL_LAYOUT,
    keepWithin: KEEP_WITHIN,
    bound: '10%',
    kernel: true,
  },
  { name: 'log-linear, 16 per power of two', layout: logLinearLayout(4, 496), keepWithin: 0, bound: '6.25%', kernel: true },
  {
    name: "the kernel's 8, exported 4 per power of two (/metrics, histogram_quantile)",
    layout: EXPORTED,
    keepWithin: 0,
    bound: '25%',
    kernel: false,
  },
];

function main(): void {
  const samples = flag('samples', 20_000);
  const seeds = flag('seeds', 5);
  const errors = LAYOUTS.map(() => [] as number[]);
  const worstBy = LAYOUTS.map(() => ({ error: 0, where: '' }));
  for (let seed = 1; seed <= seeds; seed++) {
    for (const d of DISTRIBUTIONS) {
      const rnd = random(seed * 1000 + DISTRIBUTIONS.indexOf(d));
      const values = Array.from({ length: samples }, () => Math.max(16, Math.round(d.draw(rnd))));
      const sorted = [...values].sort((a, b) => a - b);
      const max = sorted.at(-1)!;
      LAYOUTS.forEach(({ layout, keepWithin }, i) => {
        const counts = new Array<number>(layout.slots).fill(0);
        for (const v of values) counts[layout.slotOf(v)]!++;
        for (const q of [0.5, 0.95, 0.99]) {
          const exact = sorted[Math.ceil(q * sorted.length) - 1]!;
          const error = Math.abs(quantileUs(layout, counts, q, max, keepWithin)! - exact) / exact;
          errors[i]!.push(error);
          if (error > worstBy[i]!.error) worstBy[i] = { error, where: `${d.name}, p${q * 100}` };
        }
      });
    }
  }
  const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
  console.log(
    `${DISTRIBUTIONS.length} distributions × ${seeds} seeds × ${samples} samples, p50/p95/p99; error = |estimate - exact| / exact`,
  );
  console.log(
    '| layout | slots | proven bound (16 us .. 4.5 h) | median error | 99th pct error | worst error (where) | bytes per key and CPU | keys in 32 MiB, 2 / 64 CPUs |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |');
  LAYOUTS.forEach(({ name, layout, bound, kernel }, i) => {
    const sorted = [...errors[i]!].sort((a, b) => a - b);
    const bytes = layout.slots * 8 + 16;
    const keys = (cpus: number) => Math.floor((32 * 1024 * 1024) / (bytes * cpus)).toLocaleString('en');
    console.log(
      `| ${name} | ${layout.slots} | ${bound} | ${pct(median(sorted))} | ${pct(sorted[Math.ceil(0.99 * sorted.length) - 1]!)} | ${pct(worstBy[i]!.error)} (${worstBy[i]!.where}) | ${kernel ? bytes.toLocaleString('en') : '—'} | ${kernel ? `${keys(2)} / ${keys(64)}` : '—'} |`,
    );
  });
}

main();
