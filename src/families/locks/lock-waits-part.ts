import { sql, type RawBuilder } from 'kysely';
import type { FlushInput, FlushPart, PreparedPart } from '../flush-part.js';
import { addExact } from '../../exact-int.js';
import type { LwlockTrancheNames } from '../../postmaster/lwlock-tranche-names.js';
import { LockWaitReader, type EvictLockWaits, type LockWaitRow, type LwlockWaitRow } from './lock-wait-reader.js';

/**
 * The lock families' part of a flush: bpf_stats.query_lock_waits and query_lwlock_waits.
 * Nothing is read or written while neither the locks nor the lwlock set was attached.
 *
 * @example
 * const part = new LockWaitsPart(trancheNames, (map, keys) => object.maps.lookupAndDelete(map, keys)); // one of the FlushWriter's parts
 */
export class LockWaitsPart implements FlushPart {
  readonly name = 'lock_waits';
  private readonly reader: LockWaitReader;

  /** `evict`: deletes quiet entries from the maps (absent: the maps keep every entry). */
  constructor(trancheNames: LwlockTrancheNames, evict?: EvictLockWaits, log?: (line: string) => void) {
    this.reader = new LockWaitReader(trancheNames, evict, log);
  }

  wouldWriteNothing(): boolean {
    return this.reader.settled();
  }

  prepare({ maps, measured }: FlushInput): PreparedPart {
    if (!measured.has('locks') && !measured.has('lwlock')) return { statements: [], commit: () => undefined };
    const rows = this.reader.prepare(maps, measured);
    return { statements: lockWaitUpserts(rows), commit: rows.commit };
  }
}

/**
 * The increments as upserts (one INSERT ... SELECT FROM unnest(...) ON CONFLICT per table that
 * has rows): the builder cannot say unnest, so they are kysely sql templates. Counts and times accumulate.
 */
function lockWaitUpserts(batch: { locks: LockWaitRow[]; lwlocks: LwlockWaitRow[] }): RawBuilder<unknown>[] {
  const locks = merge(batch.locks, (r) => [r.locktype, r.mode, r.database, r.relation]);
  const lwlocks = merge(batch.lwlocks, (r) => [r.tranche, r.mode]);
  const statements: RawBuilder<unknown>[] = [];
  if (locks.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.query_lock_waits AS t
             (userid, dbid, toplevel, queryid, locktype, mode, database, relation, waits, wait_time_ms, last_seen)
      SELECT u.*, now() FROM unnest(
             ${locks.map((r) => r.userid)}::oid[], ${locks.map((r) => r.dbid)}::oid[],
             ${locks.map((r) => r.toplevel)}::bool[], ${locks.map((r) => r.queryid)}::int8[],
             ${locks.map((r) => r.locktype)}::text[], ${locks.map((r) => r.mode)}::text[],
             ${locks.map((r) => r.database)}::oid[], ${locks.map((r) => r.relation)}::oid[],
             ${locks.map((r) => r.waits.toString())}::int8[], ${locks.map((r) => r.waitMs)}::float8[]) AS u
      ON CONFLICT (node, userid, dbid, toplevel, queryid, locktype, mode, database, relation) DO UPDATE
         SET waits = t.waits + excluded.waits, wait_time_ms = t.wait_time_ms + excluded.wait_time_ms,
             last_seen = excluded.last_seen`);
  }
  if (lwlocks.length) {
    statements.push(sql`
      INSERT INTO bpf_stats.query_lwlock_waits AS t
             (userid, dbid, toplevel, queryid, tranche, mode, waits, wait_time_ms, last_seen)
      SELECT u.*, now() FROM unnest(
             ${lwlocks.map((r) => r.userid)}::oid[], ${lwlocks.map((r) => r.dbid)}::oid[],
             ${lwlocks.map((r) => r.toplevel)}::bool[], ${lwlocks.map((r) => r.queryid)}::int8[],
             ${lwlocks.map((r) => r.tranche)}::text[], ${lwlocks.map((r) => r.mode)}::text[],
             ${lwlocks.map((r) => r.waits.toString())}::int8[], ${lwlocks.map((r) => r.waitMs)}::float8[]) AS u
      ON CONFLICT (node, userid, dbid, toplevel, queryid, tranche, mode) DO UPDATE
         SET waits = t.waits + excluded.waits, wait_time_ms = t.wait_time_ms + excluded.wait_time_ms,
             last_seen = excluded.last_seen`);
  }
  return statements;
}

/** Rows that name the same table key (e.g. two tranche ids Postgres names alike) become one: ON CONFLICT may touch a row once. */
function merge<R extends LockWaitRow | LwlockWaitRow>(rows: R[], detail: (r: R) => unknown[]): R[] {
  const byKey = new Map<string, R>();
  for (const r of rows) {
    const key = JSON.stringify([r.userid, r.dbid, r.toplevel, r.queryid, ...detail(r)]);
    const seen = byKey.get(key);
    if (seen) byKey.set(key, { ...seen, waits: addExact(seen.waits, r.waits), waitMs: seen.waitMs + r.waitMs });
    else byKey.set(key, r);
  }
  return [...byKey.values()];
}
