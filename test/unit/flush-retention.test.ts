import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createQueryId, PostgresQueryCompiler, sql, type RawBuilder } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import type { FlushPart } from '../../src/families/flush-part.js';
import { FlushWriter } from '../../src/flush/flush-writer.js';
import { HistoryPart } from '../../src/flush/history-part.js';
import { MetricRows } from '../../src/flush/metric-rows.js';
import type { QueryRow } from '../../src/storage/metric-row.js';
import { QueryIncrements } from '../../src/storage/query-increments.js';
import { answeringDb, queryHistoryRows } from '../support/increments-db.js';
import { querySample, snapshotOf } from '../support/map-samples.js';

/*
 * What a flush leaves behind. With thousands of statements changing in every flush, anything a
 * flush keeps until the next one is megabytes of the collector's steady memory: the binary arrays
 * it sends, and a row per key. Each case holds only a WeakRef to what must not outlive the flush
 * and asks V8 for a full collection.
 */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function collected(ref: WeakRef<object>): Promise<boolean> {
  // A WeakRef's target stays alive until the job that made or read it is over.
  await new Promise((resolve) => setImmediate(resolve));
  gc();
  return ref.deref() === undefined;
}

const db = answeringDb();
let increments: QueryIncrements;
beforeAll(async () => {
  increments = await QueryIncrements.resolve(db);
});

/** The first parameter of `statement`, compiled by a compiler of its own (a shared one keeps its last parameters). */
function parameterOf(statement: RawBuilder<unknown>): unknown {
  return new PostgresQueryCompiler().compileQuery(statement.toOperationNode(), createQueryId()).parameters[0];
}

/** Encodes `rows` as query_stats and then history do in one flush; a WeakRef to the encoding. */
function encodeTwice(rows: QueryRow[]): WeakRef<object> {
  const first = parameterOf(increments.unnest(rows)) as Buffer;
  // History sends the same rows in the same flush: the very same array.
  expect(parameterOf(increments.unnest([...rows]))).toBe(first);
  return new WeakRef(first);
}

function queryRows(count: number): QueryRow[] {
  return Array.from({ length: count }, (_, i) => ({ userid: 10, dbid: 5, toplevel: true, queryid: String(i + 1), values: [i, 2.5, null] }));
}

describe('what a flush leaves behind', () => {
  it('does not keep the parameters of its statement once written (the compiler is its own)', async () => {
    let parameter: WeakRef<Buffer> | null = null;
    const part: FlushPart = {
      name: 'data',
      prepare: () => {
        const array = Buffer.alloc(1 << 20);
        parameter = new WeakRef(array);
        return { statements: [sql`INSERT INTO t SELECT * FROM unnest(${array}::bytea[])`], commit: () => undefined };
      },
    };
    expect(await new FlushWriter(db, [part]).write({} as never)).toBe(1);
    expect(await collected(parameter!)).toBe(true);
  });

  it('encodes the same query rows once within a flush, and keeps the encoding no longer', async () => {
    const encoded = encodeTwice(queryRows(1000));
    expect(await collected(encoded)).toBe(true);
  });

  it('keeps a waiting history key by its identity and its sums, not by the row the flush made', async () => {
    const rows = new MetricRows(1, () => undefined);
    const history = new HistoryPart(db, rows, increments, 300_000);
    const values = waitOneFlush(rows, history, 3);
    expect(await collected(values)).toBe(true);
    // What waits still goes out: the next flush that writes history has the key's row.
    const maps = snapshotOf({ queries: [querySample(7, 5)] });
    const due = history.prepare({ maps, measured: MEASURED, lazy: false, startedMs: performance.now() });
    expect(queryHistoryRows(due, db)).toBe(1);
  });
});

const MEASURED = new Set(['query']);

/** A lazy flush of statement 7 at `calls` whose history waits; a WeakRef to the values of the row it made. */
function waitOneFlush(rows: MetricRows, history: HistoryPart, calls: number): WeakRef<object> {
  const maps = snapshotOf({ queries: [querySample(7, calls)] });
  const prepared = history.prepare({ maps, measured: MEASURED, lazy: true, startedMs: performance.now() });
  expect(prepared.build).toBeUndefined();
  // The same rows history was given (MetricRows prepares once per read of the maps).
  const made = rows.prepare(maps, MEASURED);
  expect(made.queries).toHaveLength(1);
  made.commitQueries();
  made.commitBackends();
  prepared.commit();
  return new WeakRef(made.queries[0]!.values);
}
