import { describe, expect, it } from 'vitest';
import type { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { WaitEventHistoryPart } from '../../src/families/waits/wait-event-history-part.js';
import type { BackendWaitEventRow, QueryWaitEventRow } from '../../src/families/waits/wait-events-part.js';
import type { FlushInput } from '../../src/families/flush-part.js';
import { MAX_ROWS_PER_TABLE } from '../../src/families/flush-part.js';
import { answeringDb } from '../support/increments-db.js';

/*
 * The wait events' history between intervals, as test/unit/history-part.test.ts checks the query
 * history's: keys changing in every flush wait as one sum each until the interval is over (what
 * the sum is goes to the database in the integration test), an explicit flush writes them at
 * once, a flush that was not written adds nothing, and more distinct keys than a flush writes
 * per table make history go early.
 */
const db = answeringDb();

function queryRow(id: number, waitMs: number): QueryWaitEventRow {
  return {
    userid: 10,
    dbid: 5,
    toplevel: true,
    queryid: String(id),
    waitEventType: 'Timeout',
    waitEvent: 'PgSleep',
    waits: 1,
    waitMs,
    runqMs: 0,
  };
}

const NO_BACKENDS: BackendWaitEventRow[] = [];

/** A history part fed `rows` as the wait-events part's rows of each flush. */
function historyOf(intervalMs: number) {
  const source = { preparedRows: { queries: [] as QueryWaitEventRow[], backends: NO_BACKENDS } };
  const part = new WaitEventHistoryPart(source, intervalMs);
  return {
    part,
    flush(queries: QueryWaitEventRow[], lazy = true) {
      source.preparedRows = { queries, backends: NO_BACKENDS };
      const input: FlushInput = { maps: {} as MapSnapshot, measured: new Set(['cpu']), lazy, startedMs: performance.now() };
      return part.prepare(input);
    },
  };
}

describe('wait-event history between intervals', () => {
  it('keeps one sum per key and event however many flushes change it, and writes it with an explicit flush', () => {
    const h = historyOf(300_000);
    for (let i = 0; i < 3; i++) {
      const prepared = h.flush([queryRow(1, 100), queryRow(2, 50)]);
      expect(prepared.build).toBeUndefined();
      prepared.commit();
    }
    expect(h.part.pendingKeys).toBe(2);
    // A flush that was not written adds nothing: its increments stay in the maps.
    h.flush([queryRow(1, 100)]).skipped?.();
    expect(h.part.pendingKeys).toBe(2);
    const explicit = h.flush([queryRow(1, 100)], false);
    const statements = explicit.build!().map((s) => s.compile(db));
    expect(statements).toHaveLength(1);
    expect(statements[0]!.sql).toContain('query_wait_event_stats_history');
    // Two keys, key 1 with its three waiting flushes and this one: 400 ms, key 2: 150 ms.
    expect(statements[0]!.parameters).toContainEqual([400, 150]);
    explicit.commit();
    expect(h.part.pendingKeys).toBe(0);
  });

  it('goes early past the pending bound in distinct keys, and writes no more rows per table than a flush may', () => {
    const h = historyOf(300_000);
    const first = h.flush(Array.from({ length: MAX_ROWS_PER_TABLE }, (_, i) => queryRow(i, 1)));
    expect(first.build).toBeUndefined();
    first.commit();
    const past = h.flush([queryRow(MAX_ROWS_PER_TABLE, 1)]);
    expect(past.build).toBeDefined();
    past.build!();
    past.commit();
    // The new key and the oldest waiting ones up to the bound; one is left for the next flush, which writes it however lazy.
    expect(h.part.pendingKeys).toBe(1);
    const next = h.flush([]);
    expect(next.build).toBeDefined();
    next.build!();
    next.commit();
    expect(h.part.pendingKeys).toBe(0);
  });
});
