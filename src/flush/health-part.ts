import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { MapFill } from '../collector/map-samples.js';
import type { FlushInput, FlushPart, PreparedPart } from '../families/flush-part.js';
import { packageRoot } from '../package-root.js';
import { shorten } from '../shorten.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { MetricRows } from './metric-rows.js';

/** What one flush saw of the BPF side, for its health row. */
export interface FlushObservation {
  /** Rows this flush writes (query and backend rows). */
  rows: number;
  /** Milliseconds from the start of the flush to its health statement. */
  ms: number;
  /** The BPF `counters`, cumulative since the object was loaded. */
  counters: Record<string, bigint>;
  fill: MapFill[];
}

/** How often the health row is written when no flush has anything else to write (a heartbeat). */
export const HEALTH_HEARTBEAT_MS = 30_000;

/**
 * The collector's row in bpf_stats.health, keyed by (host, pid): its part of each flush, in
 * the flush's statement, so the row says exactly what the committed data contains. A flush with
 * nothing else to write leaves it alone when it is a lazy (periodic) one (an idle server gets no statement), unless what it shows
 * changed (dropped events, map fill, probe sets, a failure to clear) or the heartbeat is due:
 * last_flush_at is then at most max(interval, 30 s) old while the collector runs. A flush that
 * fails cannot write it; the failure (last_error, pending_rows) is written on its own when the
 * database still answers, and always by the next flush that succeeds. The last of the parts:
 * flush_ms runs to the moment the statement is assembled.
 *
 * @example
 * const health = new HealthPart(db, rows, { postmasterPid: 42, intervalMs: 1000, probeSets: () => ['cpu'], historyRetentionMs: null });
 * await health.start();
 * new FlushWriter(db, [..., health]);
 */
export class HealthPart implements FlushPart {
  readonly name = 'health';
  readonly host = hostname();
  readonly pid = process.pid;
  private readonly startedAt = new Date();
  private flushes = 0;
  private rowsWritten = 0;
  private lastRows = 0;
  private failedFlushes = 0;
  private pendingRows = 0;
  private lastError: string | null = null;
  private lastErrorAt: Date | null = null;
  private last: FlushObservation | null = null;
  /** What the flush in progress observed, until it is committed or failed. */
  private observation: FlushObservation | null = null;
  /** performance.now() of the last write of the row, and what it showed besides counts. */
  private writtenAt = -Infinity;
  private writtenShows = '';
  /** A failure was written on its own: the next flush writes the row whatever it has. */
  private failureShown = false;

  constructor(
    private readonly db: Kysely<BpfStatsDatabase>,
    private readonly rows: MetricRows,
    private readonly settings: {
      postmasterPid: number;
      intervalMs: number;
      probeSets: () => string[];
      historyRetentionMs: number | null;
      heartbeatMs?: number;
      evictedHistograms?: () => number;
    },
  ) {}

  /**
   * Inserts this collector's row. Rows of this host's collectors that are gone without stopping
   * (killed, crashed) are kept as the trace of that: marked stopped at their last update, with
   * the reason. Stopped rows leave with the row retention (src/retention/row-retention.ts).
   */
  async start(): Promise<void> {
    const others = await this.db
      .selectFrom('bpf_stats.health')
      .select('pid')
      .where('node', '=', sql<string>`current_setting('bpf_stats.node')`)
      .where('host', '=', this.host)
      .where('pid', '<>', this.pid)
      .where('stopped_at', 'is', null)
      .execute();
    const gone = others.map((r) => r.pid).filter((pid) => !alive(pid));
    if (gone.length) {
      await sql`
        UPDATE bpf_stats.health SET stopped_at = updated_at,
               stop_reason = 'crashed: the process ended without a final flush (killed or crashed); figures after '
                             || coalesce(last_flush_at::text, 'its start') || ' were not written'
         WHERE node = current_setting('bpf_stats.node') AND host = ${this.host} AND pid = ANY(${gone}::int4[]) AND stopped_at IS NULL`.execute(
        this.db,
      );
    }
    // A row of an earlier collector that had our pid: ours now, as new. An upsert, not a delete
    // and an insert: a sink's node role may not delete health rows (it could lock the table
    // against every node's flush), only insert and update its own.
    await sql`
      INSERT INTO bpf_stats.health AS h (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms, history_retention)
      VALUES (${this.host}, ${this.pid}, ${VERSION}, ${this.settings.postmasterPid}, ${this.settings.probeSets()}::text[],
        ${this.startedAt}, ${boundedInterval(this.settings.intervalMs)}, ${retention(this.settings.historyRetentionMs)}::interval)
      ON CONFLICT (node, host, pid) DO UPDATE SET
        version = excluded.version, postmaster_pid = excluded.postmaster_pid, probe_sets = excluded.probe_sets,
        started_at = excluded.started_at, interval_ms = excluded.interval_ms, history_retention = excluded.history_retention,
        last_flush_at = NULL, flush_ms = NULL, flushes = 0, rows_written = 0, last_rows = 0, dropped_events = 0,
        dropped = '{}', map_fill_pct = 0, map_fill = '{}', pending_rows = 0, failed_flushes = 0,
        last_error = NULL, last_error_at = NULL, updated_at = now(), stopped_at = NULL, stop_reason = NULL`.execute(this.db);
    this.writtenAt = performance.now();
  }

  /**
   * The flush's health upsert, one more data-modifying CTE of the flush's single statement (so
   * last_flush_at is the rows' last_seen).
   */
  prepare({ maps, measured, startedMs, lazy }: FlushInput): PreparedPart {
    const { queries, backends, deferred } = this.rows.prepare(maps, measured);
    const evicted = (m: MapFill) =>
      m.map === 'queries' ? this.rows.evictedQueries : m.map === 'histograms' ? this.settings.evictedHistograms?.() : undefined;
    const fill = maps.fill.map((m) => {
      const count = evicted(m);
      return count === undefined ? m : { ...m, evicted: count };
    });
    const flush: FlushObservation = {
      rows: queries.length + backends.length,
      ms: performance.now() - startedMs,
      counters: maps.counters,
      fill,
    };
    this.observation = flush;
    const build = () => [
      this.upsertStatement(flush, {
        flushes: this.flushes + 1,
        rowsWritten: this.rowsWritten + flush.rows,
        lastRows: flush.rows,
        pendingRows: deferred,
        succeeded: true,
      }),
    ];
    const shows = JSON.stringify([
      this.settings.probeSets(),
      flush.fill,
      deferred,
      Object.entries(flush.counters).map(([k, v]) => [k, v.toString()]),
    ]);
    const due = performance.now() - this.writtenAt >= (this.settings.heartbeatMs ?? HEALTH_HEARTBEAT_MS);
    const companion = Boolean(lazy) && !due && !this.failureShown && shows === this.writtenShows;
    return {
      // A companion's statement is built only if the flush is sent.
      ...(companion ? { statements: [], build, companion } : { statements: build() }),
      commit: () => {
        this.committed(flush, deferred);
        this.writtenAt = performance.now();
        this.writtenShows = shows;
        this.failureShown = false;
      },
      // Nothing changed: a successful flush that wrote no row, counted when the row is next written.
      skipped: () => this.committed({ ...flush, rows: 0 }, deferred),
    };
  }

  /** Whether the next flush must write the row: the heartbeat is due, or a failure was written on its own. */
  due(): boolean {
    return this.failureShown || performance.now() - this.writtenAt >= (this.settings.heartbeatMs ?? HEALTH_HEARTBEAT_MS);
  }

  /** A periodic flush ended before reading the maps (IdleGate): a successful flush that wrote no row. */
  quietTick(startedMs: number): void {
    if (this.last) this.committed({ ...this.last, rows: 0, ms: performance.now() - startedMs }, this.pendingRows);
  }

  private committed(flush: FlushObservation, deferred: number): void {
    this.observation = null;
    this.flushes++;
    this.rowsWritten += flush.rows;
    this.lastRows = flush.rows;
    this.pendingRows = deferred;
    this.last = flush;
  }

  /**
   * Records a failed flush and writes that on its own, if the database answers. The rows it
   * could not write become pending_rows, when the flush got as far as preparing them; the
   * counters and map fill are the ones it read, if it got that far.
   */
  async failed(error: string): Promise<void> {
    const observed = this.observation;
    this.observation = null;
    this.failedFlushes++;
    this.lastError = error;
    this.lastErrorAt = new Date();
    if (observed) this.pendingRows = observed.rows;
    this.failureShown = true;
    const flush = observed ?? this.last ?? { rows: 0, ms: 0, counters: {}, fill: [] };
    await this.upsertStatement(flush, {
      flushes: this.flushes,
      rowsWritten: this.rowsWritten,
      lastRows: this.lastRows,
      pendingRows: this.pendingRows,
      succeeded: false,
    })
      .execute(this.db)
      .catch(() => undefined);
  }

  /** Marks the stop and why (best effort: the database may be away). */
  async stopped(reason = 'stopped'): Promise<void> {
    await this.db
      .updateTable('bpf_stats.health')
      .set({ stopped_at: sql<Date>`now()`, updated_at: sql<Date>`now()`, stop_reason: shorten(reason, MAX_HEALTH_TEXT) })
      .where('node', '=', sql<string>`current_setting('bpf_stats.node')`)
      .where('host', '=', this.host)
      .where('pid', '=', this.pid)
      .execute()
      .catch(() => undefined);
  }

  private upsertStatement(
    flush: FlushObservation,
    state: { flushes: number; rowsWritten: number; lastRows: number; pendingRows: number; succeeded: boolean },
  ): RawBuilder<unknown> {
    const dropped = Object.fromEntries(Object.entries(flush.counters).map(([k, v]) => [k, Number(v)]));
    const droppedEvents = Object.values(flush.counters).reduce((a, b) => a + b, 0n);
    const fill = Object.fromEntries(
      flush.fill.map((m) => [
        m.map,
        {
          entries: m.entries,
          max_entries: m.maxEntries,
          ...(m.evicted === undefined ? {} : { evicted: m.evicted }),
          ...(m.overflowed === undefined ? {} : { overflowed: m.overflowed }),
          ...(m.held === undefined ? {} : { held: m.held }),
        },
      ]),
    );
    const fillPct = Math.max(0, ...flush.fill.map((m) => (100 * m.entries) / m.maxEntries));
    // A successful flush stamps the transaction time (= the rows' last_seen and history ts);
    // a failure report leaves last_flush_at and flush_ms as the last success set them.
    const lastFlushAt = state.succeeded ? sql`now()` : sql`NULL::timestamptz`;
    const flushMs = state.succeeded ? flush.ms : null;
    return sql`
      INSERT INTO bpf_stats.health AS h (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms, last_flush_at, flush_ms,
        flushes, rows_written, last_rows, dropped_events, dropped, map_fill_pct, map_fill, pending_rows, failed_flushes,
        last_error, last_error_at, history_retention, updated_at)
      VALUES (${this.host}, ${this.pid}, ${VERSION}, ${this.settings.postmasterPid}, ${this.settings.probeSets()}::text[],
        ${this.startedAt}, ${boundedInterval(this.settings.intervalMs)}, ${lastFlushAt}, ${flushMs}::float8, ${state.flushes}, ${state.rowsWritten}, ${state.lastRows},
        ${droppedEvents.toString()}::int8, ${JSON.stringify(dropped)}::jsonb, ${fillPct}, ${JSON.stringify(fill)}::jsonb,
        ${state.pendingRows}, ${this.failedFlushes}, ${this.lastError === null ? null : shorten(this.lastError, MAX_HEALTH_TEXT)}, ${this.lastErrorAt}::timestamptz,
        ${retention(this.settings.historyRetentionMs)}::interval, now())
      ON CONFLICT (node, host, pid) DO UPDATE SET
        probe_sets = excluded.probe_sets,
        last_flush_at = coalesce(excluded.last_flush_at, h.last_flush_at),
        flush_ms = coalesce(excluded.flush_ms, h.flush_ms),
        flushes = excluded.flushes, rows_written = excluded.rows_written, last_rows = excluded.last_rows,
        dropped_events = excluded.dropped_events, dropped = excluded.dropped,
        map_fill_pct = excluded.map_fill_pct, map_fill = excluded.map_fill,
        pending_rows = excluded.pending_rows, failed_flushes = excluded.failed_flushes,
        last_error = excluded.last_error, last_error_at = excluded.last_error_at,
        updated_at = excluded.updated_at, stopped_at = NULL, stop_reason = NULL`;
  }
}

const VERSION = (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;

/**
 * What the health row's CHECKs allow (migrations/1764730000000_health-bounds.sql: a sink's node
 * role writes its own row, so the row is bounded): texts of at most 4000 characters, an
 * interval of at most a day (a longer one is shown as a day; collect() still counts the
 * collector as running for three of them).
 */
const MAX_HEALTH_TEXT = 2000;
const MAX_HEALTH_INTERVAL_MS = 86_400_000;

function boundedInterval(ms: number): number {
  return Math.min(ms, MAX_HEALTH_INTERVAL_MS);
}

function retention(ms: number | null): string | null {
  return ms === null ? null : `${ms} milliseconds`;
}

/** Whether a process with this pid exists on this host (EPERM: it exists, owned by someone else). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
