import { describe, expect, it } from 'vitest';
import type { EvictedWaitSlots, QuerySample, RawMap, WaitSlot } from '../../src/collector/map-samples.js';
import { MapSnapshot } from '../../src/collector/map-snapshot.js';
import type { CounterName } from '../../src/bpf/counters.js';
import { WaitEventNames } from '../../src/families/waits/wait-event-names.js';
import { WaitEventsPart, type QueryWaitEventRow } from '../../src/families/waits/wait-events-part.js';
import { querySample } from '../support/map-samples.js';

/*
 * A query's first wait events on a CPU are counted in its queries entry (bpf/wait-events.bpf.h,
 * wait slots), not in query_wait_events: the part writes their increments as the map's, with
 * the same two-step commit, and what an evicted key's slots held beyond the written baseline is
 * owed to the next written flush, once, while the key added again counts from zero.
 */
const names = new WaitEventNames(15);
/** Timeout:PgSleep on PostgreSQL 15 (class Timeout 0x09, its first event). */
const PG_SLEEP = 0x09000000;
const pgSleep = names.name(PG_SLEEP);

function slot(waits: number, waitNs: number): WaitSlot {
  return { waitEventInfo: PG_SLEEP, waits: BigInt(waits), waitNs: BigInt(waitNs), runqNs: 0n };
}

function query(queryid: number, waitSlots: WaitSlot[]): QuerySample {
  return { ...querySample(queryid, 1), waitSlots };
}

function evicted(queryid: number, waitSlots: WaitSlot[]): EvictedWaitSlots {
  return { userid: 10, dbid: 5, toplevel: true, queryid: BigInt(queryid), waitSlots };
}

/** Empty wait-event maps: only the slots have figures. */
const emptyMap = () =>
  ({ batch: { keys: Buffer.alloc(0), values: Buffer.alloc(0), count: 0, keySize: 32, valueSize: 24 } }) as unknown as RawMap;

function snapshot(queries: QuerySample[], evictedSlots: EvictedWaitSlots[] = [], owed = () => undefined): MapSnapshot {
  return new MapSnapshot(
    [],
    queries,
    false,
    [],
    {} as Record<CounterName, bigint>,
    [],
    emptyMap as never,
    undefined,
    true,
    undefined,
    [],
    undefined,
    evictedSlots,
    owed,
  );
}

function prepare(part: WaitEventsPart, maps: MapSnapshot) {
  const prepared = part.prepare({ maps, measured: new Set(['cpu']), startedMs: 0 });
  return { ...prepared, rows: part.preparedRows.queries };
}

const figures = (rows: readonly QueryWaitEventRow[]) =>
  rows.map((r) => [r.queryid, r.waitEventType, r.waitEvent, Number(r.waits), r.waitMs]);

describe("a query's wait slots as query_wait_event_stats rows", () => {
  it('writes increments since the last written flush, and again what a flush that failed did not write', () => {
    const part = new WaitEventsPart(names);
    const first = prepare(part, snapshot([query(1, [slot(2, 3_000_000)])]));
    expect(figures(first.rows)).toEqual([['1', pgSleep.type, pgSleep.name, 2, 3]]);
    first.commit();
    // Not committed: its increment is sent again by the next flush, on top of what came since.
    expect(figures(prepare(part, snapshot([query(1, [slot(3, 4_000_000)])])).rows)).toEqual([['1', pgSleep.type, pgSleep.name, 1, 1]]);
    const third = prepare(part, snapshot([query(1, [slot(5, 9_000_000)])]));
    expect(figures(third.rows)).toEqual([['1', pgSleep.type, pgSleep.name, 3, 6]]);
    third.commit();
    expect(prepare(part, snapshot([query(1, [slot(5, 9_000_000)])])).rows).toEqual([]);
  });

  it("owes an evicted key's remainder once, until written, and counts the key added again from zero", () => {
    const part = new WaitEventsPart(names);
    const written = prepare(part, snapshot([query(1, [slot(4, 4_000_000)])]));
    written.commit();
    let passedOn = 0;
    // Evicted with one wait more than written; added again since with six of its own (more than the old baseline).
    const gone = [evicted(1, [slot(5, 6_000_000)])];
    const withEviction = snapshot([query(1, [slot(6, 7_000_000)])], gone, () => {
      passedOn++;
    });
    const failed = prepare(part, withEviction);
    expect(passedOn).toBe(1);
    expect(figures(failed.rows).sort()).toEqual(
      [
        ['1', pgSleep.type, pgSleep.name, 6, 7],
        ['1', pgSleep.type, pgSleep.name, 1, 2],
      ].sort(),
    );
    expect(part.wouldWriteNothing()).toBe(false);
    // That flush failed; the same snapshot prepared again owes the eviction once, not twice.
    const again = prepare(part, withEviction);
    expect(figures(again.rows).sort()).toEqual(figures(failed.rows).sort());
    again.commit();
    expect(part.wouldWriteNothing()).toBe(true);
    expect(prepare(part, snapshot([query(1, [slot(6, 7_000_000)])])).rows).toEqual([]);
  });
});
