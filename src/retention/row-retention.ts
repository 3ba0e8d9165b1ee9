import { sql, type Kysely, type RawBuilder } from 'kysely';
import { oneLine } from '../errors.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { HeldQueryKeys } from './held-query-keys.js';

const MAX_CHECK_PERIOD_MS = 5 * 60_000;
/** Tables with a few cumulative rows per query key: a key's rows go with its query_stats row. */
// query_histograms_log2 is written no more (migration 1764600000000): its rows go with their keys, or after the retention.
const KEYED_TABLES = [
  'bpf_stats.query_histograms',
  'bpf_stats.query_histograms_log2',
  'bpf_stats.query_lock_waits',
  'bpf_stats.query_lwlock_waits',
  'bpf_stats.query_wait_event_stats',
  'bpf_stats.query_wait_blocker_stats',
  'bpf_stats.query_texts',
  'bpf_stats.query_stats_history',
  'bpf_stats.query_histogram_history',
  'bpf_stats.query_wait_event_stats_history',
];
/**
 * The bounds on query keys the node's pg_stat_statements does not hold ("unheld": it deallocated
 * them, never stores them, or cannot be read), as shares of pg_stat_statements.max (M): per role
 * and per node, the most recently seen are kept. With the held keys known, unheld rows are what a
 * flood of distinct statements leaves: M/4 per role, M/2 per node. Without them every key is
 * unheld, and the bounds are what pg_stat_statements itself could hold: M per role, 2M per node.
 */
export function unheldBounds(held: HeldQueryKeys): { perRole: number; perNode: number } {
  return held.pgss ? { perRole: Math.ceil(held.max / 4), perNode: Math.ceil(held.max / 2) } : { perRole: held.max, perNode: 2 * held.max };
}
/** Rows deleted per table per pass at most: a backlog (a first start after months) goes in steps, never one huge transaction. */
const BATCH = 50_000;

/**
 * A sink's node role holds no DELETE (it could then LOCK the tables every node writes,
 * sql/95-sink-nodes.sql): it deletes its own rows through bpf_stats.node_delete, given their
 * tuple ids (`rows`, a query it may run: row-level security shows it its node's rows only).
 * SQL returning the number of rows deleted.
 */
function nodeDelete(table: string, rows: RawBuilder<unknown>): RawBuilder<{ n: string }> {
  return sql<{ n: string }>`SELECT bpf_stats.node_delete(${table}::regclass, ARRAY(${rows})) AS n`;
}

async function deletedCount(db: Kysely<BpfStatsDatabase>, statement: RawBuilder<{ n: string }>): Promise<number> {
  return Number((await statement.execute(db)).rows[0]!.n);
}

/**
 * Keeps the tables that gain a row per event bounded: backend_stats rows of backends that exited
 * more than `retentionMs` ago, finished collection requests and health rows of stopped collectors
 * as old go; and this node's query keys that its pg_stat_statements does not hold are kept only
 * up to bounds per role and per node (unheldBounds) and for the retention at most, so a flood of
 * distinct statements from one role leaves at most what pg_stat_statements keeps plus M/4 keys of
 * that role, whatever the retention. A row lives at most retention + check period (min(retention
 * / 4, 5 min)) after it is finished, and a burst of new keys brings the next pass forward; live
 * backends, open requests, running collectors and keys pg_stat_statements holds are never touched.
 *
 * @example
 * const retention = new RowRetention(7 * 86_400_000);
 * await retention.maintainWhenDue(db, console.log);
 */
export class RowRetention {
  private nextAt = 0;
  private lastError: string | null = null;

  /** Query keys new to this run since the last pass (QueryTextsPart counts them): a burst makes a pass due. */
  private newKeys = 0;
  /** The unheld bound per node at the last pass: more new keys than that make the next pass due at once. */
  private burst = Infinity;

  constructor(
    readonly retentionMs: number,
    /** Finished collection requests (default: retentionMs). */
    readonly collectionsRetentionMs = retentionMs,
    private readonly options: {
      /** The keys the node still holds (readHeldQueryKeys on the node's connection); absent: query rows are left alone. */
      heldKeys?: () => Promise<HeldQueryKeys>;
      /** Called with the keys whose rows a pass deleted (their texts are looked up again if they come back). */
      forget?: (keys: Array<{ userid: number; dbid: number; toplevel: boolean; queryid: string }>) => void;
      /**
       * Writing into a sink under a node role, which holds no DELETE (so that it can lock no
       * table every node writes): its own rows go through bpf_stats.node_delete, a key's history
       * rows are left to the owner's partition drops, its stopped health rows and finished
       * requests to the owner's row retention.
       */
      asNode?: boolean;
    } = {},
  ) {}

  /** Counts query keys new to this run (a flood of distinct statements brings the next pass forward). */
  noteNewKeys(count: number): void {
    this.newKeys += count;
    if (this.newKeys > this.burst) this.nextAt = 0;
  }

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

  /**
   * The query keys' rows of this node (never another node's: their pg_stat_statements is not
   * ours to read) beyond what is kept: unheld keys (see unheldBounds) idle for the retention, or
   * past the bounds per role and per node, least recently seen first; the node's bound ranks only
   * what the roles' bounds keep, so one role's flood cannot push out another role's keys. A key the node's
   * pg_stat_statements holds, or a statement runs under now, is never deleted. A key goes from
   * every table at once: query_stats, its histograms, lock waits, text and history rows (but
   * under a node role, whose history rows go only with their partitions).
   * Returns the number of keys deleted.
   */
  private async boundQueryRows(db: Kysely<BpfStatsDatabase>, cutoff: RawBuilder<Date>, held: HeldQueryKeys): Promise<number> {
    const { perRole, perNode } = unheldBounds(held);
    this.burst = perNode;
    this.newKeys = 0;
    const pgss = held.pgss ?? { userid: [], dbid: [], toplevel: [], queryid: [] };
    // A node role's history rows go with their partitions (it may not delete there).
    const keyed = this.options.asNode ? KEYED_TABLES.filter((table) => !table.endsWith('_history')) : KEYED_TABLES;
    const same = (t: string) =>
      sql.raw(
        `${t}.node = g.node AND ${t}.userid = g.userid AND ${t}.dbid = g.dbid AND ${t}.toplevel = g.toplevel AND ${t}.queryid = g.queryid`,
      );
    const { rows } = await sql<{ userid: number; dbid: number; toplevel: boolean; queryid: string }>`
      WITH held AS (
        SELECT * FROM unnest(${pgss.userid}::oid[], ${pgss.dbid}::oid[], ${pgss.toplevel}::bool[], ${pgss.queryid}::int8[]) AS h(userid, dbid, toplevel, queryid)
      ), running AS (
        SELECT * FROM unnest(${held.running.userid}::oid[], ${held.running.dbid}::oid[], ${held.running.queryid}::int8[]) AS r(userid, dbid, queryid)
      ), unheld AS (
        SELECT q.ctid AS row_id, q.last_seen,
               row_number() OVER (PARTITION BY q.userid ORDER BY q.last_seen DESC) AS in_role
          FROM bpf_stats.query_stats q
         WHERE q.node = current_setting('bpf_stats.node')
           AND NOT EXISTS (SELECT 1 FROM held h WHERE h.userid = q.userid AND h.dbid = q.dbid AND h.toplevel = q.toplevel AND h.queryid = q.queryid)
           AND NOT EXISTS (SELECT 1 FROM running r WHERE r.userid = q.userid AND r.dbid = q.dbid AND r.queryid = q.queryid)
      ), kept_in_role AS (
        -- Ranked in the node among the keys their role's bound keeps: a role flooding distinct
        -- statements loses its own oldest keys, never pushes out another role's.
        SELECT u.row_id, u.last_seen, row_number() OVER (ORDER BY u.last_seen DESC) AS in_node
          FROM unheld u WHERE u.in_role <= ${perRole}
      ), doomed AS (
        SELECT u.row_id FROM unheld u WHERE u.in_role > ${perRole}
        UNION ALL
        SELECT k.row_id FROM kept_in_role k WHERE k.in_node > ${perNode} OR k.last_seen < ${cutoff}
        LIMIT ${BATCH}
      ), ${
        this.options.asNode
          ? // The node's deletes go through node_delete, each a CTE its SELECT below reads (so it runs).
            sql`gone AS (
        SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid FROM bpf_stats.query_stats q
         WHERE q.ctid = ANY (ARRAY(SELECT d.row_id FROM doomed d))
      ), deleted AS (
        ${nodeDelete('bpf_stats.query_stats', sql`SELECT d.row_id FROM doomed d`)}
      ), ${sql.join(
        keyed.map(
          (table, i) =>
            sql`${sql.raw(`keyed_${i}`)} AS (${nodeDelete(table, sql`SELECT t.ctid FROM ${sql.raw(table)} t, gone g WHERE ${same('t')}`)})`,
        ),
      )}
      SELECT g.userid, g.dbid, g.toplevel, g.queryid::text AS queryid
        FROM gone g, deleted${sql.raw(keyed.map((_, i) => `, keyed_${i}`).join(''))}`
          : sql`gone AS (
        DELETE FROM bpf_stats.query_stats q
         WHERE q.ctid = ANY (ARRAY(SELECT d.row_id FROM doomed d))
        RETURNING q.node, q.userid, q.dbid, q.toplevel, q.queryid
      ), ${sql.join(
        keyed.map((table, i) => sql`${sql.raw(`keyed_${i}`)} AS (DELETE FROM ${sql.raw(table)} t USING gone g WHERE ${same('t')})`),
      )}
      SELECT g.userid, g.dbid, g.toplevel, g.queryid::text AS queryid FROM gone g`
      }`.execute(db);
    // Rows of keys without a query_stats row of this node (left by an older version) go after the retention, unless held.
    for (const table of KEYED_TABLES.filter((t) => !t.endsWith('_history'))) {
      const orphans = sql`
          SELECT t.ctid FROM ${sql.raw(table)} t
           WHERE t.node = current_setting('bpf_stats.node') AND t.last_seen < ${cutoff}
             AND NOT EXISTS (SELECT 1 FROM bpf_stats.query_stats q
                              WHERE q.node = t.node AND q.userid = t.userid AND q.dbid = t.dbid AND q.toplevel = t.toplevel AND q.queryid = t.queryid)
             AND NOT EXISTS (SELECT 1 FROM unnest(${pgss.userid}::oid[], ${pgss.dbid}::oid[], ${pgss.toplevel}::bool[], ${pgss.queryid}::int8[]) AS h(userid, dbid, toplevel, queryid)
                              WHERE h.userid = t.userid AND h.dbid = t.dbid AND h.toplevel = t.toplevel AND h.queryid = t.queryid)
           LIMIT ${BATCH}`;
      if (this.options.asNode) await deletedCount(db, nodeDelete(table, orphans));
      else await sql`DELETE FROM ${sql.raw(table)} WHERE ctid IN (${orphans})`.execute(db);
    }
    if (rows.length) this.options.forget?.(rows.map((r) => ({ ...r, userid: Number(r.userid), dbid: Number(r.dbid) })));
    return rows.length;
  }

  /** One pass: deletes up to BATCH expired rows of each table. */
  async maintain(db: Kysely<BpfStatsDatabase>): Promise<{ backends: number; collections: number; health: number; queries: number }> {
    // Seconds: PostgreSQL 14 refuses more than 2^31 milliseconds in an interval literal (24.8 days).
    const cutoff = sql<Date>`now() - ${`${this.retentionMs / 1000} seconds`}::interval`;
    // The owner's pass deletes every node's rows, and a node role may hold row locks on its own
    // (an UPDATE or SELECT ... FOR UPDATE in a transaction it keeps open): those rows are skipped
    // (SKIP LOCKED) and go at a later pass, rather than the pass waiting on them and failing for
    // every node. A node's pass sees (row-level security) and deletes (node_delete) its own only.
    const expired = (table: string, where: RawBuilder<unknown>) =>
      this.options.asNode
        ? deletedCount(db, nodeDelete(table, sql`SELECT t.ctid FROM ${sql.raw(table)} t WHERE ${where} LIMIT ${BATCH}`))
        : sql`
          DELETE FROM ${sql.raw(table)} WHERE ctid IN (
            SELECT t.ctid FROM ${sql.raw(table)} t WHERE ${where} LIMIT ${BATCH} FOR UPDATE OF t SKIP LOCKED)`
            .execute(db)
            .then((r) => Number(r.numAffectedRows ?? 0n));
    const backends = await expired('bpf_stats.backend_stats', sql`t.exited_at < ${cutoff}`);
    // A process's wait events go with its backend_stats row (gone above, or never written).
    await expired(
      'bpf_stats.backend_wait_event_stats',
      sql`t.last_seen < ${cutoff}
          AND NOT EXISTS (SELECT 1 FROM bpf_stats.backend_stats b WHERE (b.node, b.pid, b.backend_start) = (t.node, t.pid, t.backend_start))`,
    );
    // A node role deletes neither (the owner's pass deletes every node's).
    const collections = this.options.asNode
      ? 0
      : await expired('bpf_stats.collections', sql`t.finished_at < now() - ${`${this.collectionsRetentionMs / 1000} seconds`}::interval`);
    const health = this.options.asNode ? 0 : await expired('bpf_stats.health', sql`t.stopped_at < ${cutoff}`);
    const queries = this.options.heldKeys ? await this.boundQueryRows(db, cutoff, await this.options.heldKeys()) : 0;
    return { backends, collections, health, queries };
  }
}
