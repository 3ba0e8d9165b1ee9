import { LwlockTranche } from '../../bpf/contract.js';
import type { RecordLayout } from '../../bpf/record-layout.js';
import type { MapSnapshot } from '../../collector/map-snapshot.js';
import { DeltaTracker } from '../../flush/delta-tracker.js';
import { isZero, type ExactInt } from '../../exact-int.js';
import type { LwlockTrancheNames } from '../../target/lwlock-tranche-names.js';
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

/**
 * Turns the lock families' BPF maps (bpf/locks.bpf.h: lock_waits, lwlock_waits; cumulative
 * waits and wait_ns per key) into per-flush increments, with the same two-step commit as the
 * metric rows: increments that were not written are sent again at the next flush.
 *
 * @example
 * const reader = new LockWaitReader(trancheNames);
 * const rows = reader.prepare(snapshot, new Set(['locks'])); // after the write: rows.commit()
 */
export class LockWaitReader {
  private readonly lockDeltas = new DeltaTracker();
  private readonly lwlockDeltas = new DeltaTracker();

  constructor(private readonly trancheNames: LwlockTrancheNames) {}

  /** Only the maps of the sets attached since the last flush are read. */
  prepare(snapshot: MapSnapshot, measured: ReadonlySet<string>): LockWaitRows {
    const commits: Array<() => void> = [];
    const locks: LockWaitRow[] = [];
    const lwlocks: LwlockWaitRow[] = [];

    if (measured.has('locks')) {
      const { batch, key, value } = snapshot.map('lock_waits');
      for (let i = 0; i < batch.count; i++) {
        const k = i * batch.keySize;
        const v = i * batch.valueSize;
        const row = {
          ...waitQuery(key, batch.keys, k),
          locktype: locktypeName(key.intNumber(batch.keys, k, 'locktag_type')),
          mode: lockModeName(key.intNumber(batch.keys, k, 'mode')),
          database: key.intNumber(batch.keys, k, 'database'),
          relation: key.intNumber(batch.keys, k, 'relation'),
        };
        const id = batch.keys.subarray(k, k + batch.keySize).toString('hex');
        const current = [value.int(batch.values, v, 'waits'), value.int(batch.values, v, 'wait_ns')];
        const [waits, ns] = this.lockDeltas.delta(id, current) as [ExactInt, ExactInt];
        if (isZero(waits) && isZero(ns)) continue;
        locks.push({ ...row, waits, waitMs: Number(ns) / 1e6 });
        commits.push(() => this.lockDeltas.commit(id, current));
      }
    }

    if (measured.has('lwlock')) {
      const { batch, key, value } = snapshot.map('lwlock_waits');
      const nameField = key.field('tranche');
      for (let i = 0; i < batch.count; i++) {
        const k = i * batch.keySize;
        const v = i * batch.valueSize;
        const raw = batch.keys.subarray(k + nameField.offset, k + nameField.offset + nameField.size);
        const end = raw.indexOf(0);
        const probeName = raw.toString('latin1', 0, end < 0 ? raw.length : end);
        const trancheId = key.intNumber(batch.keys, k, 'tranche_id');
        const row = {
          ...waitQuery(key, batch.keys, k),
          // The USDT probe passes Postgres' own name; without it the id is named from the binary.
          tranche: probeName || (trancheId === LwlockTranche.LWLOCK_TRANCHE_UNKNOWN ? 'unknown' : this.trancheNames.name(trancheId)),
          mode: lwlockModeName(key.intNumber(batch.keys, k, 'mode')),
        };
        const id = batch.keys.subarray(k, k + batch.keySize).toString('hex');
        const current = [value.int(batch.values, v, 'waits'), value.int(batch.values, v, 'wait_ns')];
        const [waits, ns] = this.lwlockDeltas.delta(id, current) as [ExactInt, ExactInt];
        if (isZero(waits) && isZero(ns)) continue;
        lwlocks.push({ ...row, waits, waitMs: Number(ns) / 1e6 });
        commits.push(() => this.lwlockDeltas.commit(id, current));
      }
    }

    return { locks, lwlocks, commit: () => commits.forEach((c) => c()) };
  }
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
