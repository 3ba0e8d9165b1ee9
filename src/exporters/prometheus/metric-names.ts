import { METRIC_COLUMNS } from '../../families/index.js';
import { layoutOfCounts, type HistogramLayout } from '../../collector/histogram-layout.js';

/** The prefix of every series this exporter writes (the collector's own health: `pg_bpf_stats_`). */
export const PREFIX = 'pg_bpf';

/** How one bpf_stats metric column becomes a Prometheus counter. */
export interface ColumnMetric {
  /** The column in bpf_stats (e.g. on_cpu_ms). */
  column: string;
  /** The name without the prefix and the scope (e.g. on_cpu_seconds_total). */
  suffix: string;
  /** Multiplies the flush value (milliseconds for time columns) into the base unit. */
  scale: number;
  description: string;
}

/**
 * Prometheus naming for a column: base units and the unit before `_total`. Times are kept in
 * milliseconds by bpf_stats (like pg_stat_statements) and exported in seconds; bytes stay bytes;
 * counts are plain `_total` counters.
 *
 * @example
 * columnMetric({ column: 'on_cpu_ms', unit: 'ns' }).suffix;        // 'on_cpu_seconds_total'
 * columnMetric({ column: 'blk_read_bytes', unit: 'count' }).suffix; // 'blk_read_bytes_total'
 * columnMetric({ column: 'calls', unit: 'count' }).suffix;          // 'calls_total'
 */
export function columnMetric(column: { column: string; unit: string; description?: string }): ColumnMetric {
  const description = (column.description ?? column.column).split(/(?<=\.) /)[0]!;
  if (column.unit === 'ns') {
    if (!column.column.endsWith('_ms')) throw new Error(`time column ${column.column} does not end in _ms`);
    return {
      column: column.column,
      suffix: `${column.column.slice(0, -'_ms'.length)}_seconds_total`,
      scale: 1 / 1000,
      description: description.replace(/^Milliseconds/, 'Seconds'),
    };
  }
  return { column: column.column, suffix: `${column.column}_total`, scale: 1, description };
}

/** Every metric column's counter, in METRIC_COLUMNS order (the order of a flush row's values). */
export const COLUMN_METRICS: readonly ColumnMetric[] = METRIC_COLUMNS.map(columnMetric);

/** The histogram kinds of bpf_stats.query_histograms and their Prometheus names (seconds). */
export const HISTOGRAM_METRICS: Readonly<Record<string, { name: string; help: string }>> = {
  query_latency: { name: `${PREFIX}_query_latency_seconds`, help: 'Statement latency (probe set latency), all statements of a database.' },
  runq: {
    name: `${PREFIX}_runq_latency_seconds`,
    help: 'Run-queue waits: each wait of a backend for a CPU (probe set sched), all statements of a database.',
  },
  io: { name: `${PREFIX}_block_io_latency_seconds`, help: 'Block IO request latency (probe set io), all statements of a database.' },
};

/** One cumulative bucket: observations at or below `le` seconds. */
export interface Bucket {
  le: number;
  count: number;
}

/**
 * Kernel buckets per exported bucket: /metrics shows 4 `le` bounds per power of two (every
 * other bound of the kernel's 8), 128 buckets per series instead of 257, so that a database's
 * three histograms stay under 400 series. histogram_quantile() over them is off by less than a
 * bucket, 1/4 of the value (2 us below 16 us); bpf_stats.hist_quantile keeps the full resolution
 * (docs/percentiles.md).
 */
export const KERNEL_BUCKETS_PER_EXPORTED = 2;

/**
 * The cumulative `le` buckets of a histogram of bpf_stats.query_histograms (its counts, in the
 * kernel's log-linear layout, histogram-layout.ts), KERNEL_BUCKETS_PER_EXPORTED slots to a
 * bucket, bounds in seconds. The group that ends with the last slot has no finite bound: the
 * caller adds `+Inf` with the total.
 *
 * @example
 * cumulativeBuckets([1, 0, 2, 5, ...]); // [{ le: 2e-6, count: 1 }, { le: 4e-6, count: 8 }, ...]
 */
export function cumulativeBuckets(slots: readonly number[], layout: HistogramLayout = layoutOfCounts(slots.length)): Bucket[] {
  const buckets: Bucket[] = [];
  let count = 0;
  for (let slot = 0; slot < slots.length; slot++) {
    count += slots[slot]!;
    const end = layout.upperUs(slot);
    if ((slot + 1) % KERNEL_BUCKETS_PER_EXPORTED === 0 && end !== Infinity) buckets.push({ le: end / 1e6, count });
  }
  return buckets;
}

/** A bucket bound as Prometheus clients print it (shortest round-tripping form, `+Inf`). */
export function formatLe(le: number): string {
  return le === Infinity ? '+Inf' : String(le);
}
