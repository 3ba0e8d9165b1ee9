import type pg from 'pg';
import { holdsPasswordSql, mayHoldPassword, WITHHELD_TEXT } from '../password-text.js';

/** The figures `top` shows, per second; bpf_stats columns in milliseconds (calls: a count). */
export const TOP_METRICS = ['calls', 'total', 'cpu', 'runq', 'io', 'lock', 'lwlock', 'reclaim'] as const;
export type TopMetric = (typeof TOP_METRICS)[number];

/** One row of a read: cumulative figures (null: not measured by the probe sets attached). */
export interface TopRow {
  key: string;
  /** Rows that appeared after this time (ms since the epoch) have no earlier baseline: 0. */
  sinceMs: number;
  values: Record<TopMetric, number | null>;
  text: string | null;
  /** A statement's wait event with the most time since its stats_since, as Type:Event (bpf_stats.query_wait_events); null: none, or a backend row. */
  waitEvent?: string | null;
}

export interface BackendTopRow extends TopRow {
  pid: number;
  backendType: string;
}

/** One read of bpf_stats: the statements and live backends that moved lately. */
export interface TopRead {
  /** The last flush the figures include (ms since the epoch); null: no collector flushed yet. */
  flushedAtMs: number | null;
  /** Collectors writing here that flushed in the last minute. */
  collectors: number;
  droppedEvents: number;
  lastError: string | null;
  queries: TopRow[];
  backends: BackendTopRow[];
}

/**
 * The one statement of a refresh. Only rows seen in the last RECENT window are read: `top` shows
 * what moves, and a table of thousands of idle statements costs nothing per refresh. Query text
 * comes through bpf_stats.query_time (pg_stat_statements where installed, else NULL).
 */
const RECENT = "interval '15 seconds'";
const METRICS_SQL = (p: string) =>
  `${p}.total_time_ms AS total, ${p}.on_cpu_ms AS cpu, ${p}.runq_wait_ms AS runq, ${p}.io_wait_ms AS io,
   ${p}.lock_wait_ms AS lock, ${p}.lwlock_wait_ms AS lwlock, ${p}.reclaim_ms AS reclaim`;
/**
 * A text, cut to what a screen shows, or the placeholder where it may hold a password: the
 * collector stores that placeholder, but a row an older release wrote (a sink's older node) may
 * hold the text itself. Tested whole, before the cut, as the collector tests it.
 */
const shownText = (column: string) => `CASE WHEN ${holdsPasswordSql(column)} THEN '${WITHHELD_TEXT}' ELSE left(${column}, 300) END`;
export const TOP_SQL = `
SELECT (SELECT max(last_flush_at) FROM bpf_stats.health) AS flushed_at,
       (SELECT count(*) FROM bpf_stats.health WHERE stopped_at IS NULL AND last_flush_at > now() - interval '1 minute') AS collectors,
       (SELECT coalesce(sum(dropped_events), 0) FROM bpf_stats.health WHERE stopped_at IS NULL) AS dropped_events,
       (SELECT last_error FROM bpf_stats.health WHERE stopped_at IS NULL AND last_error IS NOT NULL ORDER BY last_error_at DESC LIMIT 1) AS last_error,
       (SELECT coalesce(json_agg(q), '[]') FROM (
          SELECT q.node || '/' || q.userid || '/' || q.dbid || '/' || q.toplevel || '/' || q.queryid AS key, q.stats_since AS since, q.calls,
                 ${METRICS_SQL('q')}, ${shownText('t.query')} AS text,
                 (SELECT w.wait_event_type || ':' || w.wait_event FROM bpf_stats.query_wait_event_stats w
                   WHERE (w.node, w.userid, w.dbid, w.toplevel, w.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)
                     AND w.wait_event_type <> '' ORDER BY w.wait_time_ms DESC LIMIT 1) AS wait_event
            FROM bpf_stats.query_stats q
            JOIN bpf_stats.query_time t USING (node, userid, dbid, toplevel, queryid)
           WHERE q.last_seen > now() - ${RECENT}
             -- top's own statement is not part of the picture
             AND q.queryid IS DISTINCT FROM (SELECT queryid FROM bpf_stats.backend_stats
                                              WHERE pid = pg_backend_pid() AND exited_at IS NULL ORDER BY backend_start DESC LIMIT 1)) q) AS queries,
       (SELECT coalesce(json_agg(b), '[]') FROM (
          SELECT b.node || '/' || b.pid || '/' || b.backend_start AS key, b.pid, b.backend_type, b.backend_start AS since, NULL::bigint AS calls,
                 ${METRICS_SQL('b')}, ${shownText('t.query')} AS text
            FROM bpf_stats.backend_stats b
            LEFT JOIN LATERAL (SELECT query FROM bpf_stats.query_time t
                                WHERE t.node = b.node AND t.queryid = b.queryid AND t.dbid = b.datid AND t.userid = b.usesysid LIMIT 1) t ON true
           WHERE b.exited_at IS NULL AND b.last_seen > now() - ${RECENT} AND b.pid <> pg_backend_pid()) b) AS backends`;

interface JsonRow extends Record<TopMetric, number | null> {
  key: string;
  since: string;
  text: string | null;
  wait_event?: string | null;
  pid?: number;
  backend_type?: string;
}

/** Reads bpf_stats once (one statement). */
export async function readTop(client: pg.ClientBase): Promise<TopRead> {
  const { rows } = await client.query<{
    flushed_at: Date | null;
    collectors: string;
    dropped_events: string;
    last_error: string | null;
    queries: JsonRow[];
    backends: JsonRow[];
  }>(TOP_SQL);
  const row = rows[0]!;
  return {
    flushedAtMs: row.flushed_at ? row.flushed_at.getTime() : null,
    collectors: Number(row.collectors),
    droppedEvents: Number(row.dropped_events),
    lastError: row.last_error,
    queries: row.queries.map(topRow),
    backends: row.backends.map((r) => ({ ...topRow(r), pid: r.pid!, backendType: r.backend_type! })),
  };
}

function topRow(r: JsonRow): TopRow {
  const values = Object.fromEntries(TOP_METRICS.map((m) => [m, r[m] === null || r[m] === undefined ? null : Number(r[m])])) as Record<
    TopMetric,
    number | null
  >;
  return {
    key: r.key,
    sinceMs: Date.parse(r.since),
    values,
    text: r.text === null || !mayHoldPassword(r.text) ? r.text : WITHHELD_TEXT,
    ...(r.wait_event !== undefined ? { waitEvent: r.wait_event } : {}),
  };
}
