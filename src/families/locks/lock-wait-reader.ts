import { LwlockTranche } from '../../bpf/contract.js';
import type { RecordLayout } from '../../bpf/record-layout.js';
import type { MapSnapshot } from '../../collector/map-snapshot.js';
import type { MapBatch } from '../../native/bpf-native.js';
import { EvictableDeltas, type CumulativeEntry } from '../../deltas/evictable-deltas.js';
import { MapEviction } from '../../deltas/map-eviction.js';
import type { ExactInt } from '../../exact-int.js';
import type { LwlockTrancheNames } from '../../postmaster/lwlock-tranche-names.js';
import { lockModeName, locktypeName, lwlockModeName } from './lock-names.js';

/** The query a wait belongs to: pg_stat_statements' key. */
interface WaitQuery {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
}

/** One bpf_stats.query_lock_waits row's increments. */
export interface LockWaitRow extends WaitQuery {
  locktype: string;
  mode: string;
  /** 0 when the lock tag names no database / relation. */
  database: number;
  relation: number;
  waits: ExactInt;
  waitMs: number;
}

/** One bpf_stats.query_lwlock_waits row's increments. */
export interface LwlockWaitRow extends WaitQuery {
  tranche: string;
  mode: string;
  waits: ExactInt;
  waitMs: number;
}

/** What one flush writes for the lock families; commit() once it is written. */
export interface LockWaitRows {
  locks: LockWaitRow[];
  lwlocks: LwlockWaitRow[];
  commit(): void;
}

/** Deletes keys from one of the lock maps, returning each value as it was deleted (null: already gone). */
export type EvictLockWaits = (map: 'lock_waits' | 'lwlock_waits', rawKeys: Buffer[]) => Array<Buffer | null>;

/** A lock map's entry: its cumulative [waits, wait_ns] and the row it is written as. */
interface WaitEntry<Row> extends CumulativeEntry {
  readonly row: Omit<Row, 'waits' | 'waitMs'>;
}

/**
 * Turns the lock families' BPF maps (bpf/locks.bpf.h: lock_waits, lwlock_waits; cumulative
 * waits and wait_ns per key) into per-flush increments, with the same two-step commit as the
 * metric rows: increments that were not written are sent again at the next flush. After a
 * written flush the quiet entries leave the maps (EvictableDeltas), so a map filled by
 * statements long gone heals.
 *
 * @example
 * const reader = new LockWaitReader(trancheNames, (map, keys) => object.maps.lookupAndDelete(map, keys));
 * const rows = reader.prepare(snapshot, new Set(['locks'])); // after the write: rows.commit()
 */
export class LockWaitReader {
  private readonly lockDeltas = new EvictableDeltas<WaitEntry<LockWaitRow>>();
  private readonly lwlockDeltas = new EvictableDeltas<WaitEntry<LwlockWaitRow>>();
  /** lock_waits_full and lwlock_waits_full as the last written flush read them: one more refusal is pressure. */
  private readonly refusedBefore = { lock_waits: 0n, lwlock_waits: 0n };
  /** The maps the last flush read: a set detached since leaves its map as it is, with nothing to do. */
  private reading = { locks: false, lwlocks: false };

  private readonly evictions: Record<'lock_waits' | 'lwlock_waits', MapEviction<Buffer>>;

  constructor(
    private readonly trancheNames: LwlockTrancheNames,
    evict?: EvictLockWaits,
    log?: (line: string) => void,
  ) {
    const eviction = (map: 'lock_waits' | 'lwlock_waits') => new MapEviction(map, evict && ((keys: Buffer[]) => evict(map, keys)), log);
    this.evictions = { lock_waits: eviction('lock_waits'), lwlock_waits: eviction('lwlock_waits') };
  }

  /** Whether a flush would find nothing to write or evict here (IdleGate). */
  settled(): boolean {
    return (
      (!this.reading.locks || this.lockDeltas.settled(this.evictions.lock_waits.enabled)) &&
      (!this.reading.lwlocks || this.lwlockDeltas.settled(this.evictions.lwlock_waits.enabled))
    );
  }

  /** Only the maps of the sets attached since the last flush are read. */
  prepare(snapshot: MapSnapshot, measured: ReadonlySet<string>): LockWaitRows {
    const reading = { locks: measured.has('locks'), lwlocks: measured.has('lwlock') };
    const locks = reading.locks ? this.readLocks(snapshot) : null;
    const lwlocks = reading.lwlocks ? this.readLwlocks(snapshot) : null;
    return {
      locks: locks?.rows ?? [],
      lwlocks: lwlocks?.rows ?? [],
      commit: () => {
        this.reading = reading;
        locks?.commit();
        lwlocks?.commit();
      },
    };
  }

  private readLocks(snapshot: MapSnapshot): { rows: LockWaitRow[]; commit: () => void } {
    const { batch, key, value } = snapshot.map('lock_waits');
    return this.increments(snapshot, 'lock_waits', this.lockDeltas, batch, (keys, k, values, v) => ({
      ...waitCounts(keys, k, batch.keySize, values, v, value),
      row: {
        ...waitQuery(key, keys, k),
        locktype: locktypeName(key.intNumber(keys, k, 'locktag_type')),
        mode: lockModeName(key.intNumber(keys, k, 'mode')),
        database: key.intNumber(keys, k, 'database'),
        relation: key.intNumber(keys, k, 'relation'),
      },
    }));
  }

  private readLwlocks(snapshot: MapSnapshot): { rows: LwlockWaitRow[]; commit: () => void } {
    const { batch, key, value } = snapshot.map('lwlock_waits');
    const nameField = key.field('tranche');
    return this.increments(snapshot, 'lwlock_waits', this.lwlockDeltas, batch, (keys, k, values, v) => {
      const raw = keys.subarray(k + nameField.offset, k + nameField.offset + nameField.size);
      const end = raw.indexOf(0);
      const probeName = raw.toString('latin1', 0, end < 0 ? raw.length : end);
      const trancheId = key.intNumber(keys, k, 'tranche_id');
      return {
        ...waitCounts(keys, k, batch.keySize, values, v, value),
        row: {
          ...waitQuery(key, keys, k),
          // The USDT probe passes Postgres' own name; without it the id is named from the binary.
          tranche: probeName || (trancheId === LwlockTranche.LWLOCK_TRANCHE_UNKNOWN ? 'unknown' : this.trancheNames.name(trancheId)),
          mode: lwlockModeName(key.intNumber(keys, k, 'mode')),
        },
      };
    });
  }

  /**
   * One lock map's increments since the last written flush; its commit() moves the baselines,
   * then evicts the quiet entries (sooner when an entry was refused since the last flush).
   */
  private increments<Row extends LockWaitRow | LwlockWaitRow>(
    snapshot: MapSnapshot,
    map: 'lock_waits' | 'lwlock_waits',
    deltas: EvictableDeltas<WaitEntry<Row>>,
    batch: MapBatch,
    decode: (keys: Buffer, k: number, values: Buffer, v: number) => WaitEntry<Row>,
  ): { rows: Row[]; commit: () => void } {
    const entries = Array.from({ length: batch.count }, (_, i) => decode(batch.keys, i * batch.keySize, batch.values, i * batch.valueSize));
    const { increments, commit } = deltas.prepare(entries);
    const rows = increments.map(({ entry, delta }) => ({ ...entry.row, waits: delta[0]!, waitMs: Number(delta[1]) / 1e6 }) as Row);
    const refused = snapshot.counters[`${map}_full`] ?? 0n;
    return {
      rows,
      commit: () => {
        commit();
        // Off: no need to look for quiet entries. What each deleted one held is decoded with its key as an entry of a read.
        const eviction = this.evictions[map];
        if (eviction.enabled)
          deltas.evict(
            refused > this.refusedBefore[map],
            (keys) => eviction.delete(keys)?.map((held, i) => held && decode(keys[i]!, 0, held, 0)) ?? null,
          );
        this.refusedBefore[map] = refused;
      },
    };
  }
}

/** An entry's id, key and cumulative counters (struct wait_totals). */
function waitCounts(
  keys: Buffer,
  k: number,
  keySize: number,
  values: Buffer,
  v: number,
  value: RecordLayout<'waits' | 'wait_ns'>,
): CumulativeEntry {
  const rawKey = keys.subarray(k, k + keySize);
  return { id: rawKey.toString('hex'), rawKey, counts: [value.int(values, v, 'waits'), value.int(values, v, 'wait_ns')] };
}

/** The query key both lock maps start with (struct query_key q). */
function waitQuery(key: RecordLayout<'q.userid' | 'q.dbid' | 'q.toplevel' | 'q.queryid'>, keys: Buffer, at: number): WaitQuery {
  return {
    userid: key.intNumber(keys, at, 'q.userid'),
    dbid: key.intNumber(keys, at, 'q.dbid'),
    toplevel: key.intNumber(keys, at, 'q.toplevel') !== 0,
    queryid: BigInt.asIntN(64, key.int(keys, at, 'q.queryid')).toString(),
  };
}
