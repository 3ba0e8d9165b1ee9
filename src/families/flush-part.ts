import type { RawBuilder } from 'kysely';
import type { MapSnapshot } from '../collector/map-snapshot.js';

/** What one flush works from: the maps as read once for it, and which probe sets it speaks for. */
export interface FlushInput {
  maps: MapSnapshot;
  /** The probe sets attached at any time since the last flush: their columns are measured, not NULL. */
  measured: ReadonlySet<string>;
  /** performance.now() when the flush began. */
  startedMs: number;
  /**
   * A periodic flush, which may leave out what can wait without loss (BPF keeps the figures
   * cumulative): quiet background processes, the health row between heartbeats. Explicit
   * flushes (stop, pause, a caller's flush()) write everything that changed.
   */
  lazy?: boolean;
}

/** A part's share of one flush: what it writes, and what it remembers once that is written. */
export interface PreparedPart {
  /**
   * Data-modifying statements (INSERT / UPDATE, no trailing semicolon); each becomes a CTE of
   * the flush's one statement. None: the part has nothing to write this time.
   */
  statements: RawBuilder<unknown>[];
  /**
   * Called once the flush's statement succeeded, never when it failed: move delta baselines,
   * forget exited processes. A part that did not commit sends the same increments next time.
   */
  commit(): void;
  /**
   * The statements only go along with other parts' statements (the health row): when no other
   * part has one, nothing is sent at all, and skipped() is called instead of commit().
   */
  companion?: boolean;
  /**
   * A companion's statements, built only when the flush is sent (then used instead of
   * `statements`): on an idle server most flushes send nothing, and building statements that are
   * not sent was most of an idle tick's work. Only with `companion` and skipped().
   */
  build?(): RawBuilder<unknown>[];
  /**
   * Called instead of commit() when the flush sent nothing (only companion statements had
   * something). Absent: a part without statements commits as if written, and a companion keeps
   * nothing (its figures stay in the maps for the next flush).
   */
  skipped?(): void;
}

/**
 * The one seam of a flush. Every table a flush writes has a part: query stats, backend stats,
 * histograms, lock waits (src/families/locks/), history, health. A flush reads the BPF maps
 * once, asks every part in turn to prepare() from that input, joins all their statements into
 * ONE statement (FlushWriter) and commits every part after it succeeded.
 *
 * prepare() must not write anything or change what the part remembers: that is commit()'s job.
 *
 * @example
 * const part: FlushPart = { name: 'noop', prepare: () => ({ statements: [], commit: () => undefined }) };
 */
export interface FlushPart {
  /** Names the part's CTEs (e.g. 'query_stats'); a plain SQL identifier. */
  readonly name: string;
  prepare(input: FlushInput): PreparedPart;
  /**
   * Whether a periodic flush now would find nothing of this part's own to write or do (IdleGate),
   * beyond what BPF noted as changed: e.g. no remainder of an evicted entry owed, no written
   * entry waiting to be evicted. Absent: nothing of its own.
   */
  wouldWriteNothing?(): boolean;
}

/*
 * Rows per table a flush writes at most. A flush that was not written (its connection
 * terminated, a statement timeout) halves the budget of the next one, and a written one doubles
 * it back: whatever kills long statements, a flush small enough to commit comes, commits, and
 * frees map entries, rather than a backlog that grows with each failure until no flush can
 * commit. Rows left out stay in the maps (their baselines are not committed): the next flush has them.
 */
export const MAX_ROWS_PER_TABLE = 16_384;
