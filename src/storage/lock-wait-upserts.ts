import { sql, type RawBuilder } from 'kysely';
import type { LockWaitBatch, LockWaitRow, LwlockWaitRow } from '../collect/lock-wait-collector.js';

/**
 * The lock families' increments as upserts (one INSERT ... SELECT FROM unnest(...) ON CONFLICT
 * per table that has rows), which StatsWriter runs as more CTEs of the flush's one statement.
 * Counts and times accumulate.
 *
 * @example
 * await writer.write(batch, () => lockWaitUpserts(locks));
 */
export function lockWaitUpserts(batch: LockWaitBatch): RawBuilder<unknown>[] {
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
      ON CONFLICT (userid, dbid, toplevel, queryid, locktype, mode, database, relation) DO UPDATE
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
      ON CONFLICT (userid, dbid, toplevel, queryid, tranche, mode) DO UPDATE
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
    if (seen) byKey.set(key, { ...seen, waits: seen.waits + r.waits, waitMs: seen.waitMs + r.waitMs });
    else byKey.set(key, r);
  }
  return [...byKey.values()];
}
