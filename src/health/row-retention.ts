import { sql, type Kysely } from 'kysely';
import { oneLine } from '../errors.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { STATEMENTS_RELATION_SQL } from '../storage/pinned-session.js';

const MAX_CHECK_PERIOD_MS = 5 * 60_000;
/** Tables with one cumulative row (or a few) per query key and a last_seen. */
const QUERY_TABLES = ['bpf_stats.query_stats', 'bpf_stats.query_histograms', 'bpf_stats.query_lock_waits', 'bpf_stats.query_lwlock_waits'];
/** Rows deleted per table per pass at most: a backlog (a first start after months) goes in steps, never one huge transaction. */
const BATCH = 50_000;

/**
 * Keeps the tables that gain a row per event bounded: backend_stats rows of backends that exited
 * more than `retentionMs` ago, finished collection requests and health rows of stopped collectors
 * as old go; and the per-query tables' rows of statements not seen for as long that
 * pg_stat_statements no longer holds either (it deallocates rare statements; without it, not
 * seen for the retention is enough), so a flood of distinct statements is not kept forever. A row lives at most retention + check period (min(retention / 4, 5 min)) after it is
 * finished; live backends, open requests and running collectors are never touched.
 *
 * @example
 * const retention = new RowRetention(7 * 86_400_000);
 * await retention.maintainWhenDue(db, console.log);
 */
export class RowRetention {
  private nextAt = 0;
  private lastError: string | null = null;

  constructor(
    readonly retentionMs: number,
    /** Finished collection requests (default: retentionMs). */
    readonly collectionsRetentionMs = retentionMs,
  ) {}

  get checkPeriodMs(): number {
    return Math.max(1000, Math.min(this.retentionMs / 4, MAX_CHECK_PERIOD_MS));
  }

  /** Whether a pass should run now. */
  due(now = Date.now()): boolean {
    return now >= this.nextAt;
  }

  /** Runs a pass when due; a failure is logged once per distinct message and retried at the next period, never stopping a flush. */
  async maintainWhenDue(db: Kysely<BpfStatsDatabase>, log: (line: string) => void): Promise<void> {
    if (!this.due()) return;
    this.nextAt = Date.now() + this.checkPeriodMs;
    try {
      const deleted = await this.maintain(db);
      // A full batch: more are waiting, come back at the next flush.
      if (Object.values(deleted).some((n) => n >= BATCH)) this.nextAt = 0;
      this.lastError = null;
    } catch (error) {
      const message = oneLine(error);
      if (message !== this.lastError) log(`row retention failed, will retry: ${message}`);
      this.lastError = message;
    }
  }

  /** One pass: deletes up to BATCH expired rows of each table. */
  async maintain(db: Kysely<BpfStatsDatabase>): Promise<{ backends: number; collections: number; health: number; queries: number }> {
    // Seconds: PostgreSQL 14 refuses more than 2^31 milliseconds in an interval literal (24.8 days).
    const cutoff = sql<Date>`now() - ${`${this.retentionMs / 1000} seconds`}::interval`;
    const backends = await sql`
      DELETE FROM bpf_stats.backend_stats WHERE (pid, backend_start) IN (
        SELECT pid, backend_start FROM bpf_stats.backend_stats WHERE exited_at < ${cutoff} LIMIT ${BATCH})`.execute(db);
    const collections = await sql`
      DELETE FROM bpf_stats.collections WHERE id IN (
        SELECT id FROM bpf_stats.collections
         WHERE finished_at < now() - ${`${this.collectionsRetentionMs / 1000} seconds`}::interval LIMIT ${BATCH})`.execute(db);
    const health = await sql`DELETE FROM bpf_stats.health WHERE stopped_at < ${cutoff}`.execute(db);
    // Qualified by the extension's schema: the session's path is pinned to pg_catalog.
    const pgss = (await sql.raw<{ name: string }>(STATEMENTS_RELATION_SQL).execute(db)).rows[0]?.name ?? null;
    let queries = 0;
    for (const table of QUERY_TABLES) {
      const forgotten = pgss
        ? sql`NOT EXISTS (SELECT 1 FROM ${sql.raw(pgss)} s WHERE s.userid = q.userid AND s.dbid = q.dbid AND s.toplevel = q.toplevel AND s.queryid = q.queryid)`
        : sql`true`;
      const result = await sql`
        DELETE FROM ${sql.raw(table)} WHERE ctid IN (
          SELECT q.ctid FROM ${sql.raw(table)} q WHERE q.last_seen < ${cutoff} AND ${forgotten} LIMIT ${BATCH})`.execute(db);
      queries = Math.max(queries, Number(result.numAffectedRows ?? 0n));
    }
    // A statement's text goes once no figure of its key is left (per node: a sink holds several).
    await sql`
      DELETE FROM bpf_stats.query_texts WHERE ctid IN (
        SELECT t.ctid FROM bpf_stats.query_texts t
         WHERE t.last_seen < ${cutoff}
           AND NOT EXISTS (SELECT 1 FROM bpf_stats.query_stats q
                            WHERE q.node = t.node AND q.userid = t.userid AND q.dbid = t.dbid AND q.toplevel = t.toplevel AND q.queryid = t.queryid)
         LIMIT ${BATCH})`.execute(db);
    return {
      backends: Number(backends.numAffectedRows ?? 0n),
      collections: Number(collections.numAffectedRows ?? 0n),
      health: Number(health.numAffectedRows ?? 0n),
      queries,
    };
  }
}
