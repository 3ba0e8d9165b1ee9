import { sql, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from './flush-part.js';
import { HistogramDeltas, type HistogramRow } from './histogram-deltas.js';
import type { HistogramSample } from '../collector/decode-histograms.js';
import { PRESSURE_FILL } from './held-keys.js';
import { MapEviction } from './map-eviction.js';

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
 * counts are added slot by slot, its max kept as the greatest seen. The counts travel as one
 * flat int8[] (rows × slots) and are re-sliced on the server (beyond the builder: a sql template).
 */
function histogramUpsert(rows: readonly HistogramRow[]): RawBuilder<unknown> {
  const slots = rows[0]!.counts.length;
  const flat = rows.flatMap((r) => r.counts.map((c) => c.toString()));
  return sql`
    INSERT INTO bpf_stats.query_histograms AS h (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms, last_seen)
    SELECT u.userid, u.dbid, u.toplevel, u.queryid, u.kind, c.counts, (SELECT sum(x) FROM unnest(c.counts) x)::bigint, u.max_ms, now()
      FROM unnest(${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[], ${rows.map((r) => r.toplevel)}::bool[],
                  ${rows.map((r) => r.queryid)}::int8[], ${rows.map((r) => r.kind)}::text[], ${rows.map((r) => r.maxMs)}::float8[])
           WITH ORDINALITY AS u(userid, dbid, toplevel, queryid, kind, max_ms, n)
     CROSS JOIN LATERAL (SELECT (${flat}::int8[])[(u.n - 1) * ${slots} + 1 : u.n * ${slots}] AS counts) c
    ON CONFLICT (node, userid, dbid, toplevel, queryid, kind) DO UPDATE SET
      counts = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(h.counts, excluded.counts) WITH ORDINALITY AS t(a, b, i) ORDER BY i),
      observations = h.observations + excluded.observations,
      max_ms = greatest(h.max_ms, excluded.max_ms),
      last_seen = excluded.last_seen`;
}
