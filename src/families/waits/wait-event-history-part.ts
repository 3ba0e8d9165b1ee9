import { sql, type RawBuilder } from 'kysely';
import { addExact } from '../../exact-int.js';
import type { FlushInput, FlushPart, PreparedPart } from '../flush-part.js';
import { MAX_ROWS_PER_TABLE } from '../flush-part.js';
import type { BackendWaitEventRow, QueryWaitEventRow, WaitEventsPart } from './wait-events-part.js';

type WaitRow = QueryWaitEventRow | BackendWaitEventRow;

/** Keys per table whose sums wait in memory at most, as for query_stats_history (src/flush/history-part.ts). */
const MAX_PENDING_ROWS = MAX_ROWS_PER_TABLE;

/**
 * The wait-event tables' history (query_wait_event_stats_history, backend_wait_event_stats_history),
 * written by the rules of query_stats_history (HistoryPart): the increments the wait-events part
 * wrote since the last history row are summed per key in memory and written as one row per key
 * every `intervalMs` (at once for explicit flushes, or every flush with 0), stamped with that
 * flush's now(), only along with a flush that writes other rows, and only forgotten once that
 * flush committed, so a key's history sums to its cumulative row. It follows the timer of the
 * query history from the same start, so both are normally written by the same flushes.
 *
 * Memory: one pending row per (key, wait event) that changed in the interval, at most
 * MAX_PENDING_ROWS per table; past that the sums are written early. A flush carries at most
 * MAX_ROWS_PER_TABLE history rows per table; the rest wait, oldest first, for the next one.
 *
 * @example
 * new FlushWriter(db, [waitEvents, new WaitEventHistoryPart(waitEvents, 300_000), health]);
 */
export class WaitEventHistoryPart implements FlushPart {
  readonly name = 'wait_event_history';
  private pending = { queries: new Map<string, QueryWaitEventRow>(), backends: new Map<string, BackendWaitEventRow>() };
  private writtenAt = performance.now();
  private behind = false;

  constructor(
    private readonly source: Pick<WaitEventsPart, 'preparedRows'>,
    private readonly intervalMs = 0,
  ) {}

  /** Keys waiting for their history row (for tests and the memory bound). */
  get pendingKeys(): number {
    return this.pending.queries.size + this.pending.backends.size;
  }

  prepare({ lazy, startedMs }: FlushInput): PreparedPart {
    // The rows the wait-events part prepared for this same flush (it runs before this part).
    const { queries, backends } = this.source.preparedRows;
    const queryKeys = queries.map(queryRowKey);
    const backendKeys = backends.map(backendRowKey);
    const due =
      !lazy ||
      this.behind ||
      startedMs - this.writtenAt >= this.intervalMs * 0.95 ||
      keysAfter(this.pending.queries, queryKeys) > MAX_PENDING_ROWS ||
      keysAfter(this.pending.backends, backendKeys) > MAX_PENDING_ROWS;
    if (!due) {
      // Added only once the flush that wrote them to the cumulative tables committed.
      const commit = () => {
        addInto(this.pending.queries, queries, queryKeys);
        addInto(this.pending.backends, backends, backendKeys);
      };
      return { statements: [], commit, skipped: () => undefined };
    }
    let written: { queries: string[]; backends: string[] } | null = null;
    const build = () => {
      const q = historyRows(this.pending.queries, queries, queryKeys);
      const b = historyRows(this.pending.backends, backends, backendKeys);
      written = { queries: q.keys, backends: b.keys };
      return historyInserts(q.rows, b.rows);
    };
    return {
      statements: [],
      build,
      companion: true,
      commit: () => {
        if (!written) return;
        for (const key of written.queries) this.pending.queries.delete(key);
        for (const key of written.backends) this.pending.backends.delete(key);
        this.behind = this.pendingKeys > 0;
        this.writtenAt = startedMs;
      },
      skipped: () => undefined,
    };
  }
}

function queryRowKey(r: QueryWaitEventRow): string {
  return JSON.stringify([r.userid, r.dbid, r.toplevel, r.queryid, r.waitEventType, r.waitEvent]);
}

function backendRowKey(r: BackendWaitEventRow): string {
  return JSON.stringify([r.pid, r.backendStartUs.toString(), r.waitEventType, r.waitEvent]);
}

function sum<Row extends WaitRow>(a: Row, b: Row): Row {
  return { ...a, waits: addExact(a.waits, b.waits), waitMs: a.waitMs + b.waitMs, runqMs: a.runqMs + b.runqMs };
}

/** Adds a written flush's rows to what waits (two ids a version names alike become one key). */
function addInto<Row extends WaitRow>(pending: Map<string, Row>, rows: readonly Row[], keys: readonly string[]): void {
  rows.forEach((row, i) => {
    const key = keys[i]!;
    const before = pending.get(key);
    pending.set(key, before ? sum(before, row) : row);
  });
}

/** This flush's rows with what their keys had waiting, then waiting keys oldest first, up to MAX_ROWS_PER_TABLE keys. */
function historyRows<Row extends WaitRow>(
  pending: ReadonlyMap<string, Row>,
  rows: readonly Row[],
  keys: readonly string[],
): { rows: Row[]; keys: string[] } {
  const out = new Map<string, Row>();
  rows.forEach((row, i) => {
    const key = keys[i]!;
    const seen = out.get(key) ?? pending.get(key);
    out.set(key, seen ? sum(seen, row) : row);
  });
  for (const [key, row] of pending) {
    if (out.size >= MAX_ROWS_PER_TABLE) break;
    if (!out.has(key)) out.set(key, row);
  }
  return { rows: [...out.values()], keys: [...out.keys()] };
}

/** Keys `pending` would hold with `keys` added. */
function keysAfter(pending: ReadonlyMap<string, unknown>, keys: readonly string[]): number {
  const added = new Set(keys.filter((key) => !pending.has(key)));
  return pending.size + added.size;
}

/** One INSERT ... SELECT FROM unnest(...) per history table that has rows, stamped with the flush's now(). */
function historyInserts(queries: QueryWaitEventRow[], backends: BackendWaitEventRow[]): RawBuilder<unknown>[] {
  const statements: RawBuilder<unknown>[] = [];
  if (queries.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.query_wait_event_stats_history
             (ts, userid, dbid, toplevel, queryid, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms)
      SELECT now(), u.* FROM unnest(
             ${queries.map((r) => r.userid)}::oid[], ${queries.map((r) => r.dbid)}::oid[],
             ${queries.map((r) => r.toplevel)}::bool[], ${queries.map((r) => r.queryid)}::int8[],
             ${queries.map((r) => r.waitEventType)}::text[], ${queries.map((r) => r.waitEvent)}::text[],
             ${queries.map((r) => r.waits.toString())}::int8[], ${queries.map((r) => r.waitMs)}::float8[],
             ${queries.map((r) => r.runqMs)}::float8[]) AS u`);
  }
  if (backends.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.backend_wait_event_stats_history
             (ts, pid, backend_start, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms)
      SELECT now(), u.pid, timestamptz 'epoch' + u.start_us * interval '1 microsecond', u.wait_event_type, u.wait_event, u.waits,
             u.wait_time_ms, u.runq_after_ms FROM unnest(
             ${backends.map((r) => r.pid)}::int4[], ${backends.map((r) => r.backendStartUs.toString())}::int8[],
             ${backends.map((r) => r.waitEventType)}::text[], ${backends.map((r) => r.waitEvent)}::text[],
             ${backends.map((r) => r.waits.toString())}::int8[], ${backends.map((r) => r.waitMs)}::float8[],
             ${backends.map((r) => r.runqMs)}::float8[])
             AS u(pid, start_us, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms)`);
  }
  return statements;
}
