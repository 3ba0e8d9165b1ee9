import { sql, type RawBuilder } from 'kysely';
import type { MapSnapshot } from '../../collector/map-snapshot.js';
import { queryIdentityKey, type BackendSample, type EvictedWaitSlots, type RawMap } from '../../collector/map-samples.js';
import { addExact, isZero, type ExactInt } from '../../exact-int.js';
import { EvictableDeltas, type CumulativeEntry } from '../../deltas/evictable-deltas.js';
import { DeltaTracker } from '../../deltas/delta-tracker.js';
import type { FlushInput, FlushPart, PreparedPart } from '../flush-part.js';
import { MapEviction } from '../../deltas/map-eviction.js';
import { PG_EPOCH_UNIX_US } from '../../postgres-timestamp.js';
import { bootTimeSeconds } from '../../postmaster/proc-stat.js';
import type { WaitEventNames } from './wait-event-names.js';

/** A process without PgBackendStatus is keyed as backend_stats keys it: boot time + its task's start (src/flush/metric-rows.ts). */
const BOOT_TIME_UNIX_US = BigInt(bootTimeSeconds()) * 1_000_000n;

/** ClientRead's wait_event_info (class Client, id 0 in every version): BPF counts those sleeps in the process's record. */
const CLIENT_READ = 0x06000000;

/** [waits, wait ns, run-queue ns]: one row's figures in a record, cumulative. */
type Counts = readonly [bigint, bigint, bigint];

const NO_COUNTS: Counts = [0n, 0n, 0n];

/**
 * What a process's record counts by wait event, by row: 'client' (client_waits, client_wait_ns),
 * 'unclassed' (unclassed_ns, no wait event and no wait) and each wait slot by its
 * wait_event_info in decimal.
 */
type RecordCounts = ReadonlyMap<string, Counts>;

function recordCounts(sample: BackendSample): RecordCounts {
  const counts = new Map<string, Counts>([
    ['client', [sample.clientWaits, sample.clientWaitNs, 0n]],
    ['unclassed', [0n, sample.unclassedNs, 0n]],
  ]);
  for (const slot of sample.waitSlots) counts.set(String(slot.waitEventInfo), [slot.waits, slot.waitNs, slot.runqNs]);
  return counts;
}

/** The two maps of bpf/wait-events.bpf.h. */
type WaitMap = 'query_wait_events' | 'backend_wait_events';

/** Deletes keys from one of the maps, returning each value as it was deleted (null: already gone). */
export type EvictWaitEvents = (map: WaitMap, rawKeys: Buffer[]) => Array<Buffer | null>;

/** One bpf_stats.query_wait_event_stats row's increments. */
export interface QueryWaitEventRow {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
  waitEventType: string;
  waitEvent: string;
  waits: ExactInt;
  waitMs: number;
  /** The run-queue wait after each wake-up, with the event still set (bpf/wait-events.bpf.h). */
  runqMs: number;
}

/** One bpf_stats.backend_wait_event_stats row's increments. */
export interface BackendWaitEventRow {
  pid: number;
  /** Microseconds since the Unix epoch. */
  backendStartUs: bigint;
  waitEventType: string;
  waitEvent: string;
  waits: ExactInt;
  waitMs: number;
  runqMs: number;
}

/** What an entry's row is, apart from its figures. */
type RowKey<Row> = Omit<Row, 'waits' | 'waitMs' | 'runqMs'>;

interface WaitEntry<Row> extends CumulativeEntry {
  readonly row: RowKey<Row>;
}

/**
 * One wait-event map's increments since the last written flush (cumulative waits and wait_ns
 * per key), with the two-step commit and the eviction of quiet keys every cumulative map of a
 * family has (EvictableDeltas, MapEviction): a key that was not written is sent again, and a map
 * filled by statements or backends long gone heals.
 */
class WaitEventMap<Row extends QueryWaitEventRow | BackendWaitEventRow> {
  private readonly deltas = new EvictableDeltas<WaitEntry<Row>>();
  private readonly eviction: MapEviction<Buffer>;
  /** The map's *_full counter plus map_no_memory as the last written flush read them: one more refusal is pressure. */
  private refusedBefore = 0n;

  constructor(
    private readonly map: WaitMap,
    private readonly counter: 'wait_events_full' | 'backend_wait_events_full',
    evict?: EvictWaitEvents,
    log?: (line: string) => void,
  ) {
    this.eviction = new MapEviction(map, evict && ((keys: Buffer[]) => evict(map, keys)), log);
  }

  /** Nothing left to write; with `untilEvicted`, nor any key held until it is evicted. */
  settled(untilEvicted = true): boolean {
    return this.deltas.settled(this.eviction.enabled && untilEvicted);
  }

  /** `decodeRow`: the row an entry is written as; null while that is not known yet (the entry waits, cumulative, in the map). */
  prepare(
    snapshot: MapSnapshot,
    decodeRow: (raw: RawMap<WaitMap>, keys: Buffer, at: number) => RowKey<Row> | null,
  ): { rows: Row[]; commit: () => void } {
    const raw = snapshot.map(this.map) as RawMap<WaitMap>;
    const { batch } = raw;
    const decode = (keys: Buffer, k: number, values: Buffer, v: number): WaitEntry<Row> | null => {
      const row = decodeRow(raw, keys, k);
      if (!row) return null;
      const rawKey = keys.subarray(k, k + batch.keySize);
      return {
        id: rawKey.toString('hex'),
        rawKey,
        counts: [raw.value.int(values, v, 'waits'), raw.value.int(values, v, 'wait_ns'), raw.value.int(values, v, 'runq_ns')],
        row,
      };
    };
    const entries = Array.from({ length: batch.count }, (_, i) =>
      decode(batch.keys, i * batch.keySize, batch.values, i * batch.valueSize),
    ).filter((entry): entry is WaitEntry<Row> => entry !== null);
    const { increments, commit } = this.deltas.prepare(entries);
    const rows = increments.map(
      ({ entry, delta }) => ({ ...entry.row, waits: delta[0]!, waitMs: Number(delta[1]) / 1e6, runqMs: Number(delta[2]) / 1e6 }) as Row,
    );
    // A key refused with room left (map_no_memory, any map's) is pressure too: the maps share the
    // collector's memory cgroup, and an evicted key gives its memory back to all of them.
    const refused = (snapshot.counters[this.counter] ?? 0n) + (snapshot.counters.map_no_memory ?? 0n);
    return {
      rows,
      commit: () => {
        commit();
        if (this.eviction.enabled) {
          // An evicted entry whose row is not known yet (the rare process still awaiting its identity) loses what it held beyond its baseline.
          this.deltas.evict(
            refused > this.refusedBefore,
            (keys) => this.eviction.delete(keys)?.map((held, i) => held && decode(keys[i]!, 0, held, 0)) ?? null,
          );
        }
        this.refusedBefore = refused;
      },
    };
  }
}

/**
 * The wait events' part of a flush: bpf_stats.query_wait_event_stats and backend_wait_event_stats, from
 * the maps the cpu set fills (bpf/wait-events.bpf.h), each id named as this server's version
 * names it (WaitEventNames).
 *
 * @example
 * const part = new WaitEventsPart(new WaitEventNames(15), (map, keys) => object.maps.lookupAndDelete(map, keys));
 */
export class WaitEventsPart implements FlushPart {
  readonly name = 'wait_events';
  /** The query rows the last written flush wrote (for the Prometheus exporter). */
  lastCommitted: readonly QueryWaitEventRow[] = [];
  /**
   * The rows the flush being prepared writes (its increments, before rows naming one key are
   * merged): WaitEventHistoryPart, later in the same flush, sums them into history.
   */
  preparedRows: { queries: readonly QueryWaitEventRow[]; backends: readonly BackendWaitEventRow[] } = { queries: [], backends: [] };
  private readonly queries: WaitEventMap<QueryWaitEventRow>;
  private readonly backends: WaitEventMap<BackendWaitEventRow>;
  /** Per process (`<kernel pid>:<task start>`): its record's counts (RecordCounts) as last written. */
  private recordWritten = new Map<string, RecordCounts>();
  /** Per query key and event (`<key>|<wait_event_info>`): what its entry's wait slots counted, as last written. */
  private readonly slotsWritten = new DeltaTracker();
  /** Rows of what evicted query keys' wait slots counted beyond the last written: owed to the next written flush. */
  private slotsOwed: QueryWaitEventRow[] = [];
  /** The evicted keys' slots already owed (two snapshots carry the same ones when the first reached no prepare). */
  private readonly evictedSeen = new WeakSet<EvictedWaitSlots>();

  constructor(
    private readonly names: WaitEventNames,
    evict?: EvictWaitEvents,
    log?: (line: string) => void,
    private readonly backendRowKey: (sample: BackendSample) => { pid: number; backendStartUs: bigint } | null = (sample) => ({
      pid: sample.pid,
      backendStartUs: sample.backendStartUs ? sample.backendStartUs + PG_EPOCH_UNIX_US : sample.taskStartNs / 1000n + BOOT_TIME_UNIX_US,
    }),
  ) {
    this.queries = new WaitEventMap<QueryWaitEventRow>('query_wait_events', 'wait_events_full', evict, log);
    this.backends = new WaitEventMap<BackendWaitEventRow>('backend_wait_events', 'backend_wait_events_full', evict, log);
  }

  private named(raw: RawMap<WaitMap>, keys: Buffer, at: number): { waitEventType: string; waitEvent: string } {
    const event = this.names.name(raw.key.intNumber(keys, at, 'wait_event_info'));
    return { waitEventType: event.type, waitEvent: event.name };
  }

  private queryRow(raw: RawMap<WaitMap>, keys: Buffer, at: number): RowKey<QueryWaitEventRow> {
    const key = (raw as RawMap<'query_wait_events'>).key;
    return {
      userid: key.intNumber(keys, at, 'q.userid'),
      dbid: key.intNumber(keys, at, 'q.dbid'),
      toplevel: key.intNumber(keys, at, 'q.toplevel') !== 0,
      queryid: BigInt.asIntN(64, key.int(keys, at, 'q.queryid')).toString(),
      ...this.named(raw, keys, at),
    };
  }

  /**
   * A process's entries are written under the backend_stats row of its record in the same
   * snapshot (live or exited); one with no record there (gone before the collector saw it) under
   * the key its row would have had, its kernel pid and task start.
   */
  private backendRows(snapshot: MapSnapshot): (raw: RawMap<WaitMap>, keys: Buffer, at: number) => RowKey<BackendWaitEventRow> | null {
    const records = new Map(snapshot.backends.map((sample) => [`${sample.key}:${sample.taskStartNs}`, sample]));
    return (raw, keys, at) => {
      const key = (raw as RawMap<'backend_wait_events'>).key;
      const pid = key.intNumber(keys, at, 'pid');
      const taskStartNs = key.int(keys, at, 'task_start_ns');
      const sample = records.get(`${pid}:${taskStartNs}`);
      const row = sample ? this.backendRowKey(sample) : { pid, backendStartUs: taskStartNs / 1000n + BOOT_TIME_UNIX_US };
      return row && { ...row, ...this.named(raw, keys, at) };
    };
  }

  /**
   * What BPF counts in each process's record rather than in backend_wait_events (its sleeps
   * waiting for the client, ClientRead; the remainder of its runnable intervals, with no wait
   * event; its first few other events, bpf/wait-events.bpf.h): increments since the last written
   * flush, as rows of backend_wait_event_stats. A record gone from the snapshot (written after
   * its exit, forgotten) is forgotten here too.
   */
  private recordRows(snapshot: MapSnapshot): { rows: BackendWaitEventRow[]; commit: () => void } {
    const rows: BackendWaitEventRow[] = [];
    const next = new Map<string, RecordCounts>();
    for (const sample of snapshot.backends) {
      const id = `${sample.key}:${sample.taskStartNs}`;
      const was = this.recordWritten.get(id);
      const now = recordCounts(sample);
      const changed = [...now].filter(([key, counts]) => counts.some((v, i) => v !== (was?.get(key) ?? NO_COUNTS)[i]));
      const row = changed.length ? this.backendRowKey(sample) : null;
      if (!row) {
        if (was) next.set(id, was);
        continue;
      }
      for (const [key, counts] of changed) {
        const before = was?.get(key) ?? NO_COUNTS;
        const event = key === 'unclassed' ? { type: '', name: '' } : this.names.name(key === 'client' ? CLIENT_READ : Number(key));
        rows.push({
          ...row,
          waitEventType: event.type,
          waitEvent: event.name,
          waits: counts[0] - before[0],
          waitMs: Number(counts[1] - before[1]) / 1e6,
          runqMs: Number(counts[2] - before[2]) / 1e6,
        });
      }
      next.set(id, now);
    }
    return { rows, commit: () => (this.recordWritten = next) };
  }

  /**
   * What BPF counts in each query's entry rather than in query_wait_events (its first events on a
   * CPU, bpf/wait-events.bpf.h): increments since the last written flush, of the keys this
   * snapshot read (the changed ones) and of the keys evicted since the last snapshot, whose
   * figures end there (a key added again counts from zero).
   */
  private slotRows(snapshot: MapSnapshot): { rows: QueryWaitEventRow[]; commit: () => void } {
    const row = (query: EvictedWaitSlots, event: number, delta: readonly ExactInt[]): QueryWaitEventRow => {
      const name = this.names.name(event);
      return {
        userid: query.userid,
        dbid: query.dbid,
        toplevel: query.toplevel,
        queryid: BigInt.asIntN(64, query.queryid).toString(),
        waitEventType: name.type,
        waitEvent: name.name,
        waits: delta[0]!,
        waitMs: Number(delta[1]!) / 1e6,
        runqMs: Number(delta[2]!) / 1e6,
      };
    };
    const slotId = (query: EvictedWaitSlots, event: number) => `${queryIdentityKey(query)}|${event}`;
    // The evicted first: a key added again since, in this snapshot too, counts from zero.
    for (const query of snapshot.evictedWaitSlots) {
      if (this.evictedSeen.has(query)) continue;
      this.evictedSeen.add(query);
      for (const slot of query.waitSlots) {
        const id = slotId(query, slot.waitEventInfo);
        const delta = this.slotsWritten.delta(id, [slot.waits, slot.waitNs, slot.runqNs]);
        this.slotsWritten.forget(id);
        // Rows naming one key are summed where they are written (waitEventUpserts, history, Prometheus).
        if (!delta.every(isZero)) this.slotsOwed.push(row(query, slot.waitEventInfo, delta));
      }
    }
    snapshot.evictedWaitSlotsOwed();
    const rows: QueryWaitEventRow[] = [];
    const read: Array<[string, ExactInt[]]> = [];
    for (const query of snapshot.queries) {
      for (const slot of query.waitSlots) {
        const id = slotId(query, slot.waitEventInfo);
        const counts = [slot.waits, slot.waitNs, slot.runqNs];
        const delta = this.slotsWritten.delta(id, counts);
        if (delta.every(isZero)) continue;
        rows.push(row(query, slot.waitEventInfo, delta));
        read.push([id, counts]);
      }
    }
    const owed = this.slotsOwed.length;
    return {
      rows: [...rows, ...this.slotsOwed],
      commit: () => {
        for (const [id, counts] of read) this.slotsWritten.commit(id, counts);
        this.slotsOwed.splice(0, owed);
      },
    };
  }

  wouldWriteNothing(): boolean {
    // A background process's keys never go quiet (its latch wakes it every few hundred ms), so
    // waiting for them to be evicted would keep every flush of an idle server from being quiet;
    // an exited process's keys are evicted by the next full flush (the heartbeat's at the latest).
    return this.queries.settled() && this.backends.settled(false) && this.slotsOwed.length === 0;
  }

  prepare({ maps, measured, lazy }: FlushInput): PreparedPart {
    if (!measured.has('cpu')) {
      this.preparedRows = { queries: [], backends: [] };
      return { statements: [], commit: () => (this.lastCommitted = []) };
    }
    const queries = this.queries.prepare(maps, (raw, keys, at) => this.queryRow(raw, keys, at));
    const slots = this.slotRows(maps);
    const backends = this.backends.prepare(maps, this.backendRows(maps));
    const client = this.recordRows(maps);
    const queryRows = [...queries.rows, ...slots.rows];
    this.preparedRows = { queries: queryRows, backends: [...backends.rows, ...client.rows] };
    const statements = waitEventUpserts(this.preparedRows.queries, this.preparedRows.backends);
    const commit = () => {
      queries.commit();
      slots.commit();
      backends.commit();
      client.commit();
      this.lastCommitted = queryRows;
    };
    // Processes' rows alone (background processes waking on their timers) wait, cumulative in
    // BPF, for a flush that writes something else, as their backend_stats rows do
    // (src/flush/backend-stats-part.ts): a periodic flush of an idle server writes nothing.
    if (lazy && !queryRows.length && statements.length)
      return { statements: [], build: () => statements, companion: true, commit, skipped: () => undefined };
    return { statements, commit };
  }
}

/** The increments as one upsert per table that has rows; counts and times accumulate. */
function waitEventUpserts(queryRows: readonly QueryWaitEventRow[], backendRows: readonly BackendWaitEventRow[]): RawBuilder<unknown>[] {
  const queries = merge(queryRows, (r) => [r.userid, r.dbid, r.toplevel, r.queryid, r.waitEventType, r.waitEvent]);
  const backends = merge(backendRows, (r) => [r.pid, r.backendStartUs.toString(), r.waitEventType, r.waitEvent]);
  const statements: RawBuilder<unknown>[] = [];
  if (queries.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.query_wait_event_stats AS t
             (userid, dbid, toplevel, queryid, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms, last_seen)
      SELECT u.*, now() FROM unnest(
             ${queries.map((r) => r.userid)}::oid[], ${queries.map((r) => r.dbid)}::oid[],
             ${queries.map((r) => r.toplevel)}::bool[], ${queries.map((r) => r.queryid)}::int8[],
             ${queries.map((r) => r.waitEventType)}::text[], ${queries.map((r) => r.waitEvent)}::text[],
             ${queries.map((r) => r.waits.toString())}::int8[], ${queries.map((r) => r.waitMs)}::float8[],
             ${queries.map((r) => r.runqMs)}::float8[]) AS u
      ON CONFLICT (node, userid, dbid, toplevel, queryid, wait_event_type, wait_event) DO UPDATE
         SET waits = t.waits + excluded.waits, wait_time_ms = t.wait_time_ms + excluded.wait_time_ms,
             runq_after_ms = t.runq_after_ms + excluded.runq_after_ms, last_seen = excluded.last_seen`);
  }
  if (backends.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.backend_wait_event_stats AS t
             (pid, backend_start, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms, last_seen)
      SELECT u.pid, timestamptz 'epoch' + u.start_us * interval '1 microsecond', u.wait_event_type, u.wait_event, u.waits, u.wait_time_ms,
             u.runq_after_ms, now() FROM unnest(
             ${backends.map((r) => r.pid)}::int4[], ${backends.map((r) => r.backendStartUs.toString())}::int8[],
             ${backends.map((r) => r.waitEventType)}::text[], ${backends.map((r) => r.waitEvent)}::text[],
             ${backends.map((r) => r.waits.toString())}::int8[], ${backends.map((r) => r.waitMs)}::float8[],
             ${backends.map((r) => r.runqMs)}::float8[])
             AS u(pid, start_us, wait_event_type, wait_event, waits, wait_time_ms, runq_after_ms)
      ON CONFLICT (node, pid, backend_start, wait_event_type, wait_event) DO UPDATE
         SET waits = t.waits + excluded.waits, wait_time_ms = t.wait_time_ms + excluded.wait_time_ms,
             runq_after_ms = t.runq_after_ms + excluded.runq_after_ms, last_seen = excluded.last_seen`);
  }
  return statements;
}

/** Rows that name the same table key (two ids a version names alike, a BufferPin id) become one: ON CONFLICT may touch a row once. */
function merge<R extends QueryWaitEventRow | BackendWaitEventRow>(rows: readonly R[], key: (r: R) => unknown[]): R[] {
  const byKey = new Map<string, R>();
  for (const r of rows) {
    const id = JSON.stringify(key(r));
    const seen = byKey.get(id);
    if (seen)
      byKey.set(id, { ...seen, waits: addExact(seen.waits, r.waits), waitMs: seen.waitMs + r.waitMs, runqMs: seen.runqMs + r.runqMs });
    else byKey.set(id, r);
  }
  return [...byKey.values()];
}
