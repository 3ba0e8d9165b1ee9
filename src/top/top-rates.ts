import { TOP_METRICS, type BackendTopRow, type TopMetric, type TopRead, type TopRow } from './top-read.js';

/** A row's figures per second between two reads (null: not measured). */
export interface RateRow<Row extends TopRow = TopRow> {
  row: Row;
  perSecond: Record<TopMetric, number | null>;
}

export interface TopRates {
  /** Seconds between the two flushes the reads include. */
  seconds: number;
  queries: RateRow[];
  backends: Array<RateRow<BackendTopRow>>;
}

/**
 * Per-second figures between two reads. The time base is the collector's flushes (the last
 * flush each read includes), not the refresh clock: bpf_stats moves once per flush, so a refresh
 * that saw no new flush keeps the previous rates (null), and one that saw two divides by two
 * intervals. A row without a baseline counts from 0 if it appeared after the earlier read, and
 * waits one refresh otherwise (it was idle longer than the read window).
 *
 * @example
 * const rates = topRates(previous, current); // null: no new flush since `previous`
 */
export function topRates(previous: TopRead, current: TopRead): TopRates | null {
  if (previous.flushedAtMs === null || current.flushedAtMs === null || current.flushedAtMs <= previous.flushedAtMs) return null;
  const seconds = (current.flushedAtMs - previous.flushedAtMs) / 1000;
  return {
    seconds,
    queries: rates(previous.queries, current.queries, previous.flushedAtMs, seconds),
    backends: rates(previous.backends, current.backends, previous.flushedAtMs, seconds),
  };
}

function rates<Row extends TopRow>(before: readonly Row[], now: readonly Row[], beforeMs: number, seconds: number): Array<RateRow<Row>> {
  const baseline = new Map(before.map((r) => [r.key, r]));
  const out: Array<RateRow<Row>> = [];
  for (const row of now) {
    const base = baseline.get(row.key);
    if (!base && row.sinceMs <= beforeMs) continue;
    const perSecond = Object.fromEntries(
      TOP_METRICS.map((m) => {
        const v = row.values[m];
        return [m, v === null ? null : Math.max(0, v - (base?.values[m] ?? 0)) / seconds];
      }),
    ) as Record<TopMetric, number | null>;
    out.push({ row, perSecond });
  }
  return out;
}
