import { sql, type RawBuilder } from 'kysely';
import { WakerKind } from '../../bpf/contract.js';
import type { RawMap } from '../../collector/map-samples.js';
import { addExact, type ExactInt } from '../../exact-int.js';
import { EvictableDeltas, type CumulativeEntry } from '../../deltas/evictable-deltas.js';
import type { FlushInput, FlushPart, PreparedPart } from '../flush-part.js';
import { MapEviction } from '../../deltas/map-eviction.js';
import { backendTypeEnumName } from '../../postmaster/backend-type-names.js';
import type { WaitEventNames } from '../waits/wait-event-names.js';

/** One bpf_stats.query_wait_blocker_stats row's increments. */
export interface WaitBlockerRow {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
  waitEventType: string;
  waitEvent: string;
  /** What woke the waiter: a backend type as pg_stat_activity names it, or 'interrupt', 'kernel thread', ... (wakerTypeName). */
  wakerType: string;
  /** The waker's query key; all zero when it was on no query. */
  wakerUserid: number;
  wakerDbid: number;
  wakerToplevel: boolean;
  wakerQueryid: string;
  waits: ExactInt;
  waitMs: number;
}

type RowKey = Omit<WaitBlockerRow, 'waits' | 'waitMs'>;

interface BlockerEntry extends CumulativeEntry {
  readonly row: RowKey;
}

/**
 * The waker as the table names it: a child of the postmaster by its backend type (as that
 * version's pg_stat_activity names it), anything else by what it is (bpf/wait-blockers.bpf.h).
 */
export function wakerTypeName(kind: number, backendType: number, majorVersion: number): string {
  switch (kind) {
    case WakerKind.WAKER_PROCESS:
      return backendType < 0 ? 'postmaster child' : (backendTypeEnumName(majorVersion, backendType) ?? `backend type ${backendType}`);
    case WakerKind.WAKER_POSTMASTER:
      return 'postmaster';
    case WakerKind.WAKER_INTERRUPT:
      return 'interrupt';
    case WakerKind.WAKER_KERNEL_THREAD:
      return 'kernel thread';
    case WakerKind.WAKER_OTHER_PROCESS:
      return 'other process';
    default:
      return `waker kind ${kind}`;
  }
}

/** Deletes keys from query_wait_blockers, returning each value as it was deleted (null: already gone). */
export type EvictWaitBlockers = (rawKeys: Buffer[]) => Array<Buffer | null>;

/**
 * The blockers set's part of a flush: bpf_stats.query_wait_blocker_stats from the map
 * query_wait_blockers (bpf/wait-blockers.bpf.h), cumulative per key, with the two-step commit and
 * the eviction of quiet keys the wait-event maps have, so a map filled by statements long gone heals.
 *
 * @example
 * const part = new WaitBlockersPart(new WaitEventNames(15), 15, (keys) => object.maps.lookupAndDelete('query_wait_blockers', keys));
 */
export class WaitBlockersPart implements FlushPart {
  readonly name = 'wait_blockers';
  private readonly deltas = new EvictableDeltas<BlockerEntry>();
  private readonly eviction: MapEviction<Buffer>;
  /** wait_blockers_full plus map_no_memory as the last written flush read them: one more refusal is pressure. */
  private refusedBefore = 0n;

  constructor(
    private readonly names: WaitEventNames,
    private readonly majorVersion: number,
    evict?: EvictWaitBlockers,
    log?: (line: string) => void,
  ) {
    this.eviction = new MapEviction('query_wait_blockers', evict, log);
  }

  private row(raw: RawMap<'query_wait_blockers'>, keys: Buffer, at: number): RowKey {
    const { key } = raw;
    const event = this.names.name(key.intNumber(keys, at, 'wait_event_info'));
    return {
      userid: key.intNumber(keys, at, 'q.userid'),
      dbid: key.intNumber(keys, at, 'q.dbid'),
      toplevel: key.intNumber(keys, at, 'q.toplevel') !== 0,
      queryid: BigInt.asIntN(64, key.int(keys, at, 'q.queryid')).toString(),
      waitEventType: event.type,
      waitEvent: event.name,
      wakerType: wakerTypeName(key.intNumber(keys, at, 'waker.kind'), key.intNumber(keys, at, 'waker.backend_type'), this.majorVersion),
      wakerUserid: key.intNumber(keys, at, 'waker.key.userid'),
      wakerDbid: key.intNumber(keys, at, 'waker.key.dbid'),
      wakerToplevel: key.intNumber(keys, at, 'waker.key.toplevel') !== 0,
      wakerQueryid: BigInt.asIntN(64, key.int(keys, at, 'waker.key.queryid')).toString(),
    };
  }

  wouldWriteNothing(): boolean {
    return this.deltas.settled(this.eviction.enabled);
  }

  prepare({ maps }: FlushInput): PreparedPart {
    const raw = maps.map('query_wait_blockers');
    const { batch } = raw;
    const decode = (keys: Buffer, k: number, values: Buffer, v: number): BlockerEntry => {
      const rawKey = keys.subarray(k, k + batch.keySize);
      return {
        id: rawKey.toString('hex'),
        rawKey,
        counts: [raw.value.int(values, v, 'waits'), raw.value.int(values, v, 'wait_ns')],
        row: this.row(raw, keys, k),
      };
    };
    const entries = Array.from({ length: batch.count }, (_, i) => decode(batch.keys, i * batch.keySize, batch.values, i * batch.valueSize));
    const { increments, commit } = this.deltas.prepare(entries);
    const rows: WaitBlockerRow[] = increments.map(({ entry, delta }) => ({
      ...entry.row,
      waits: delta[0]!,
      waitMs: Number(delta[1]) / 1e6,
    }));
    const refused = (maps.counters.wait_blockers_full ?? 0n) + (maps.counters.map_no_memory ?? 0n);
    return {
      statements: blockerUpserts(rows),
      commit: () => {
        commit();
        if (this.eviction.enabled) {
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

/** The increments as one upsert; rows a version names alike are merged first (ON CONFLICT may touch a row once). */
function blockerUpserts(input: WaitBlockerRow[]): RawBuilder<unknown>[] {
  const byKey = new Map<string, WaitBlockerRow>();
  for (const r of input) {
    const { waits: _waits, waitMs: _waitMs, ...key } = r;
    const id = JSON.stringify(key);
    const seen = byKey.get(id);
    byKey.set(id, seen ? { ...seen, waits: addExact(seen.waits, r.waits), waitMs: seen.waitMs + r.waitMs } : r);
  }
  const rows = [...byKey.values()];
  if (!rows.length) return [];
  return [
    sql`
      INSERT INTO bpf_stats.query_wait_blocker_stats AS t
             (userid, dbid, toplevel, queryid, wait_event_type, wait_event, waker_type,
              waker_userid, waker_dbid, waker_toplevel, waker_queryid, waits, wait_time_ms, last_seen)
      SELECT u.*, now() FROM unnest(
             ${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
             ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
             ${rows.map((r) => r.waitEventType)}::text[], ${rows.map((r) => r.waitEvent)}::text[],
             ${rows.map((r) => r.wakerType)}::text[],
             ${rows.map((r) => r.wakerUserid)}::oid[], ${rows.map((r) => r.wakerDbid)}::oid[],
             ${rows.map((r) => r.wakerToplevel)}::bool[], ${rows.map((r) => r.wakerQueryid)}::int8[],
             ${rows.map((r) => r.waits.toString())}::int8[], ${rows.map((r) => r.waitMs)}::float8[]) AS u
      ON CONFLICT (node, userid, dbid, toplevel, queryid, wait_event_type, wait_event, waker_type,
                   waker_userid, waker_dbid, waker_toplevel, waker_queryid) DO UPDATE
         SET waits = t.waits + excluded.waits, wait_time_ms = t.wait_time_ms + excluded.wait_time_ms,
             last_seen = excluded.last_seen`,
  ];
}
