import { DeltaTracker } from './delta-tracker.js';
import { isZero, type ExactInt } from '../exact-int.js';
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

/**
 * Turns the cumulative BPF histograms into per-flush slot increments, with the same two-step
 * commit as the metric deltas: baselines move only once the flush was written.
 *
 * @example
 * const deltas = new HistogramDeltas();
 * const { rows, commit } = deltas.prepare(snapshot.histograms);
 * // once rows are written: commit()
 */
export class HistogramDeltas {
  private readonly tracker = new DeltaTracker();

  prepare(samples: readonly HistogramSample[]): { rows: HistogramRow[]; commit: () => void } {
    const rows: HistogramRow[] = [];
    const commits: Array<() => void> = [];
    for (const sample of samples) {
      const key = `${queryIdentityKey(sample)}/${sample.kind}`;
      if (this.tracker.isBaseline(key, sample.slots)) continue;
      const counts = this.tracker.delta(key, sample.slots);
      if (counts.every(isZero)) continue;
      rows.push({
        userid: sample.userid,
        dbid: sample.dbid,
        toplevel: sample.toplevel,
        queryid: BigInt.asIntN(64, sample.queryid).toString(),
        kind: sample.kind,
        counts,
        maxMs: Number(sample.maxNs) / 1e6,
      });
      commits.push(() => this.tracker.commit(key, sample.slots));
    }
    return { rows, commit: () => commits.forEach((c) => c()) };
  }
}
