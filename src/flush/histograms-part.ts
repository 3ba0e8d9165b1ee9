import { sql, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../families/flush-part.js';
import { HistogramDeltas, type HistogramRow } from './histogram-deltas.js';
import type { HistogramSample } from '../collector/decode-histograms.js';
import { PRESSURE_FILL } from '../deltas/held-keys.js';
import { MapEviction } from '../deltas/map-eviction.js';
import { sumExact } from '../exact-int.js';

export interface HistogramsPartOptions {
  /** Deletes histograms from the map, returning what each held when deleted (MapReaders.evictHistograms); absent: none is evicted. */
  evict?: (rawKeys: Buffer[]) => Array<HistogramSample | null>;
  /** For the one line when eviction cannot run on this kernel. */
  log?: (line: string) => void;
}

/**
 * bpf_stats.query_histograms' part of a flush: the histograms of the latency, sched and io
 * sets share one map and one table. Nothing is written when no histogram moved. After a written
 * flush the quiet histograms leave the map (HistogramDeltas), so it holds the active ones.
 *
 * @example
 * new FlushWriter(db, [..., new HistogramsPart({ evict: (keys) => object.maps.evictHistograms(keys) }), ...]);
 */
export class HistogramsPart implements FlushPart {
  readonly name = 'query_histograms';
  private readonly deltas = new HistogramDeltas();
  /** The increments the last committed flush wrote (for flush listeners). */
  lastCommitted: readonly HistogramRow[] = [];
  /** The increments the flush being prepared writes (HistoryPart, prepared after this part, adds them to the history). */
  preparedRows: readonly HistogramRow[] = [];
  /** `histograms_full` as the last written flush read it: one more refusal puts the map under pressure. */
  private refusedBefore = 0n;

  private readonly eviction: MapEviction<HistogramSample>;

  constructor(options: HistogramsPartOptions = {}) {
    this.eviction = new MapEviction('histograms', options.evict, options.log);
  }

  /** Histograms deleted from the map since load (bpf_stats.health.map_fill). */
  get evicted(): number {
    return this.deltas.evicted;
  }

  /** Whether a flush would find nothing to write or evict here (IdleGate). */
  wouldWriteNothing(): boolean {
    return this.deltas.settled(this.eviction.enabled);
  }

  prepare({ maps }: FlushInput): PreparedPart {
    const { rows, commit } = this.deltas.prepare(maps.histograms, maps.histogramsComplete);
    this.preparedRows = rows;
    const fill = maps.fill.find((f) => f.map === 'histograms');
    const refused = maps.counters.histograms_full ?? 0n;
    const pressure = (fill !== undefined && fill.entries >= PRESSURE_FILL * fill.maxEntries) || refused > this.refusedBefore;
    return {
      statements: rows.length ? [histogramUpsert(rows)] : [],
      commit: () => {
        commit();
        // The reader may stop reading these histograms again (every changed one was written).
        maps.histogramsWritten(true);
        this.lastCommitted = rows;
        this.refusedBefore = refused;
        // Off: no need to look for quiet entries (each would cost a delta, every flush).
        if (this.eviction.enabled) this.deltas.evict(pressure, (keys) => this.eviction.delete(keys));
      },
    };
  }
}

/**
 * The upsert of one flush's histogram increments, as one statement: each (query, kind) row's
 * counts are added slot by slot, its max kept as the greatest seen. Each row's counts travel as
 * one array literal (parsed once per row), its observations summed here: slicing one flat array
 * per row and summing it on the server made this statement ~1 ms of a 100-row flush's ~2.5
 * (scratch timing of the prepared statement, 100 rows onto existing keys: 2.3-3.2 -> 1.3-1.4 ms).
 * The merge walks both arrays once, side by side (every row has the same slots, HIST_SLOTS, and
 * the table refuses any other length, migration 1764600000000): at 256 slots a stored array is
 * past the TOAST threshold, compressed, and indexing it slot by slot decompressed it once per
 * slot (bench/flush-scaling.js --probes latency, all 8,000 changed: the statement 4.5 s).
 */
function histogramUpsert(rows: readonly HistogramRow[]): RawBuilder<unknown> {
  return sql`
    INSERT INTO bpf_stats.query_histograms AS h (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms, last_seen)
    SELECT u.userid, u.dbid, u.toplevel, u.queryid, u.kind, u.counts::int8[], u.observations, u.max_ms, now()
      FROM unnest(${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[], ${rows.map((r) => r.toplevel)}::bool[],
                  ${rows.map((r) => r.queryid)}::int8[], ${rows.map((r) => r.kind)}::text[], ${rows.map((r) => r.maxMs)}::float8[],
                  ${rows.map((r) => sumExact(r.counts).toString())}::int8[], ${rows.map((r) => `{${r.counts.join(',')}}`)}::text[])
           AS u(userid, dbid, toplevel, queryid, kind, max_ms, observations, counts)
    ON CONFLICT (node, userid, dbid, toplevel, queryid, kind) DO UPDATE SET
      counts = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(h.counts, excluded.counts) WITH ORDINALITY AS u(a, b, i) ORDER BY i),
      observations = h.observations + excluded.observations,
      max_ms = greatest(h.max_ms, excluded.max_ms),
      last_seen = excluded.last_seen`;
}
