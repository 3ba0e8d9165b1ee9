import { Kysely, DummyDriver, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { FlushInput } from '../../src/flush/flush-part.js';
import { HistoryPart } from '../../src/health/history-part.js';
import type { BpfStatsDatabase } from '../../src/storage/database.js';
import { MAX_ROWS_PER_TABLE, MetricRows } from '../../src/storage/metric-rows.js';
import type { QueryIncrements } from '../../src/storage/query-increments.js';
import { querySample, snapshotOf } from '../support/map-samples.js';

/*
 * History at its own granularity on a server with thousands of active statements: the same keys
 * changing in every flush wait in memory as one sum each until the interval is over; only more
 * distinct keys than a flush writes per table make history go early.
 */
const MEASURED = new Set(['query']);
const db = new Kysely<BpfStatsDatabase>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (k) => new PostgresIntrospector(k),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  },
});
// Only a flush that sends history encodes rows: these flushes are prepared, never sent.
const increments = {} as QueryIncrements;

/** One lazy (periodic) flush of `keys` statements (ids from `first`), each at `calls` so far; true when it carries history. */
function flush(rows: MetricRows, history: HistoryPart, first: number, keys: number, calls: number): boolean {
  const maps = snapshotOf({ queries: Array.from({ length: keys }, (_, i) => querySample(first + i, calls)) });
  const input: FlushInput = { maps, measured: MEASURED, lazy: true, startedMs: performance.now() };
  const prepared = history.prepare(input);
  const rowsOf = rows.prepare(maps, MEASURED);
  // As FlushWriter does once the statement succeeded: this flush's rows are written.
  rowsOf.commitQueries();
  rowsOf.commitBackends();
  prepared.commit();
  return prepared.build !== undefined;
}

describe('history between intervals', () => {
  it('keeps one sum per key however many flushes change it, and goes early past the row budget in distinct keys', () => {
    const rows = new MetricRows(1, () => undefined);
    const history = new HistoryPart(db, rows, increments, 300_000);
    const busy = 10_000;
    // The same 10,000 statements in three flushes: 10,000 sums wait, none written.
    expect([1, 2, 3].map((calls) => flush(rows, history, 0, busy, calls))).toEqual([false, false, false]);
    // Up to the budget in distinct keys still waits; one more goes out with this flush.
    expect(flush(rows, history, busy, MAX_ROWS_PER_TABLE - busy, 1)).toBe(false);
    expect(flush(rows, history, MAX_ROWS_PER_TABLE, 1, 1)).toBe(true);
  });
});
