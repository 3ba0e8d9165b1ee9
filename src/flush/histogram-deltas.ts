import { DeltaTracker } from './delta-tracker.js';
import { HeldKeys } from './held-keys.js';
import { addExact, isZero, type ExactInt } from '../exact-int.js';
import type { HistogramSample } from '../collector/decode-histograms.js';
import { queryIdentityKey } from '../collector/map-samples.js';

/** One (query, kind) histogram's increments for one flush. */
export interface HistogramRow {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
  kind: string;
  /** Per-slot increments since the last written flush. */
  counts: ExactInt[];
  /** The largest observation so far, in milliseconds (a maximum, not an increment). */
  maxMs: number;
}

/*
 * Histograms leave the map as query keys do (MetricRows): once written and quiet for
 * QUIET_FLUSHES written flushes, or for one when the map is under pressure. Without this a map
 * filled by statements long gone stayed full, and every new statement's histogram was refused.
 */
const QUIET_FLUSHES = 3;
/** Evictions per flush at most (one syscall each). */
const MAX_EVICTIONS_PER_FLUSH = 4096;

/**
 * Turns the cumulative BPF histograms into per-flush slot increments, with the same two-step
 * commit as the metric deltas: baselines move only once the flush was written. After a written
 * flush, evict() deletes the quiet histograms from the map; what one gained between the read and
 * its deletion is written by the next flush, so the table's cumulative row loses nothing.
 *
 * @example
 * const deltas = new HistogramDeltas();
 * const { rows, commit } = deltas.prepare(snapshot.histograms);
 * // once rows are written: commit(), then deltas.evict(false, (keys) => object.maps.evictHistograms(keys))
 */
export class HistogramDeltas {
  private readonly tracker = new DeltaTracker();
  private readonly held = new HeldKeys<HistogramSample>();
  /** What evicted histograms held beyond their written baseline, owed to the next flush. */
  private readonly remainders = new Map<string, HistogramRow>();
  /** Histograms deleted from the map since load (bpf_stats.health.map_fill). */
  evicted = 0;

  prepare(samples: readonly HistogramSample[]): { rows: HistogramRow[]; commit: () => void } {
    const rows = new Map<string, HistogramRow>();
    const commits: Array<() => void> = [];
    const changed = new Set<string>();
    for (const sample of samples) {
      const key = histogramKey(sample);
      if (this.tracker.isBaseline(key, sample.slots)) continue;
      const counts = this.tracker.delta(key, sample.slots);
      if (counts.every(isZero)) continue;
      rows.set(key, histogramRow(sample, counts));
      changed.add(key);
      commits.push(() => this.tracker.commit(key, sample.slots));
    }
    // A remainder adds to the row of a histogram that came back since (one row per key: ON CONFLICT touches a row once).
    const owed = [...this.remainders];
    for (const [key, remainder] of owed) {
      const row = rows.get(key);
      if (!row) rows.set(key, remainder);
      else rows.set(key, { ...row, counts: row.counts.map((c, i) => addExact(c, remainder.counts[i] ?? 0)), maxMs: Math.max(row.maxMs, remainder.maxMs) });
    }
    return {
      rows: [...rows.values()],
      commit: () => {
        commits.forEach((c) => c());
        for (const [key] of owed) this.remainders.delete(key);
        this.held.written(samples, changed, true, histogramKey);
      },
    };
  }

  /**
   * After a written flush (its commit()): deletes the histograms quiet for QUIET_FLUSHES flushes
   * (for one under `pressure`) through `evict`, which returns what each held when deleted.
   */
  evict(pressure: boolean, evict: (rawKeys: Buffer[]) => Array<HistogramSample | null>): void {
    // Written and unchanged since, or never written because it never counted anything (read between its creation and its first count).
    const quiet = this.held
      .quietest(pressure ? 1 : QUIET_FLUSHES, MAX_EVICTIONS_PER_FLUSH)
      .filter((s) => (this.tracker.has(histogramKey(s)) ? this.tracker.delta(histogramKey(s), s.slots) : s.slots).every(isZero));
    if (!quiet.length) return;
    const held = evict(quiet.map((s) => s.rawKey));
    quiet.forEach((sample, i) => {
      const key = histogramKey(sample);
      const value = held[i];
      this.held.forget(key);
      if (!value) return;
      this.evicted++;
      const counts = this.tracker.delta(key, value.slots);
      this.tracker.forget(key);
      if (!counts.every(isZero)) this.remainders.set(key, histogramRow(value, counts));
    });
  }

  /** Whether a flush would find nothing to do here: no remainder owed and, while `evicting`, no histogram left to evict. */
  settled(evicting: boolean): boolean {
    return this.remainders.size === 0 && (!evicting || this.held.size === 0);
  }
}

function histogramKey(sample: HistogramSample): string {
  return `${queryIdentityKey(sample)}/${sample.kind}`;
}

function histogramRow(sample: HistogramSample, counts: ExactInt[]): HistogramRow {
  return {
    userid: sample.userid,
    dbid: sample.dbid,
    toplevel: sample.toplevel,
    queryid: BigInt.asIntN(64, sample.queryid).toString(),
    kind: sample.kind,
    counts,
    maxMs: Number(sample.maxNs) / 1e6,
  };
}
