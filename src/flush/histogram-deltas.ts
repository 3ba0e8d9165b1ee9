import { EvictableDeltas, type CumulativeEntry } from '../deltas/evictable-deltas.js';
import { addExact, type ExactInt } from '../exact-int.js';
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

/** A histogram as EvictableDeltas keeps it: its slots are its counters. */
interface HistogramEntry extends CumulativeEntry {
  readonly sample: HistogramSample;
}

/**
 * Turns the cumulative BPF histograms into per-flush slot increments, with the same two-step
 * commit as the metric deltas: baselines move only once the flush was written. After a written
 * flush, evict() deletes the quiet histograms from the map (EvictableDeltas); what one gained
 * between the read and its deletion is written by the next flush.
 *
 * @example
 * const deltas = new HistogramDeltas();
 * const { rows, commit } = deltas.prepare(snapshot.histograms);
 * // once rows are written: commit(), then deltas.evict(false, (keys) => object.maps.evictHistograms(keys))
 */
export class HistogramDeltas {
  private readonly deltas = new EvictableDeltas<HistogramEntry>();

  /** Histograms deleted from the map since load (bpf_stats.health.map_fill). */
  get evicted(): number {
    return this.deltas.evicted;
  }

  /** `complete`: `samples` is the whole map, not only the histograms that changed since the last read. */
  prepare(samples: readonly HistogramSample[], complete = true): { rows: HistogramRow[]; commit: () => void } {
    const { increments, commit } = this.deltas.prepare(samples.map(histogramEntry), complete);
    // A remainder and the row of a histogram that came back since are one row: ON CONFLICT touches a row once.
    const rows = new Map<string, HistogramRow>();
    for (const { entry, delta } of increments) {
      const row = rows.get(entry.id);
      const counts = row ? row.counts.map((c, i) => addExact(c, delta[i] ?? 0)) : delta;
      rows.set(entry.id, histogramRow(entry.sample, counts, row?.maxMs));
    }
    return { rows: [...rows.values()], commit };
  }

  /** After a written flush: deletes the quiet histograms (EvictableDeltas.evict). */
  evict(pressure: boolean, evict: (rawKeys: Buffer[]) => Array<HistogramSample | null> | null): void {
    this.deltas.evict(pressure, (keys) => evict(keys)?.map((sample) => sample && histogramEntry(sample)) ?? null);
  }

  settled(evicting: boolean): boolean {
    return this.deltas.settled(evicting);
  }
}

function histogramEntry(sample: HistogramSample): HistogramEntry {
  return { id: `${queryIdentityKey(sample)}/${sample.kind}`, rawKey: sample.rawKey, counts: sample.slots, sample };
}

function histogramRow(sample: HistogramSample, counts: ExactInt[], maxMs = 0): HistogramRow {
  return {
    userid: sample.userid,
    dbid: sample.dbid,
    toplevel: sample.toplevel,
    queryid: BigInt.asIntN(64, sample.queryid).toString(),
    kind: sample.kind,
    counts,
    maxMs: Math.max(maxMs, Number(sample.maxNs) / 1e6),
  };
}
