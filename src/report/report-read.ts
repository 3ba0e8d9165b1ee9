import type pg from 'pg';
import { METRIC_COLUMNS } from '../families/index.js';
import { UserError } from '../errors.js';
import { holdsPasswordSql, mayHoldPassword, WITHHELD_TEXT } from '../password-text.js';
import { statementsRelation } from '../storage/pinned-session.js';
import { iso, type ReportWindows, type TimeRange } from './report-window.js';
import { KERNEL_LAYOUT, quantileUs } from '../collector/histogram-layout.js';

/** The one column every part of the time adds up to. */
export const TOTAL_COLUMN = 'total_time_ms';

/** A metric column the report reads, as its family declared it. */
export interface ReportColumn {
  column: string;
  unit: 'ns' | 'count';
  /** A detail already counted in a part of total_time_ms (reclaim, compaction, writeback throttling). */
  alreadyCounted: boolean;
  description: string;
}

/** Sums of each metric column over one period (null: not measured then). */
export type PeriodSums = Record<string, number | null>;

export interface ReportStatement {
  node: string;
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: string;
  text: string | null;
  window: PeriodSums;
  /** null: no baseline asked for; sums all null: the statement did not run then. */
  baseline: PeriodSums | null;
  /** Statement latency percentiles per period (null: no latency histogram history then, probe set `latency` off). */
  latency: { window: LatencyPercentiles | null; baseline: LatencyPercentiles | null };
  /** Wait time (ms) per wait event ('Type:Event', as pg_stat_activity names it) per period, from the wait-event history. */
  waitEvents: { window: Record<string, number>; baseline: Record<string, number> };
}

/** Percentiles of one statement's latency over one period, from its histogram history. */
export interface LatencyPercentiles {
  observations: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
}

/** Statement time of all statements per time bucket, for the charts. */
export interface ReportBucket {
  /** Offset of the bucket's start from its period's start (ms). */
  offsetMs: number;
  period: 'window' | 'baseline';
  sums: PeriodSums;
}

export interface ReportData {
  windows: ReportWindows;
  columns: ReportColumn[];
  /** Sums over every statement in each period (not only those listed). */
  totals: { window: PeriodSums; baseline: PeriodSums | null };
  statementsInWindow: number;
  statements: ReportStatement[];
  buckets: ReportBucket[];
  bucketMs: number;
  nodes: string[];
  textSource: string;
  /** Whether this database has bpf_stats.query_histogram_history (a schema older than migration 1764720000000 has not). */
  latencyHistory: boolean;
}

/** At most this many time buckets per period in the charts. */
const BUCKETS_PER_PERIOD = 60;

/**
 * The metric columns both the code (METRIC_COLUMNS, so a new family's column appears here
 * without touching the report) and this database's history table have: a database migrated by
 * an older release lacks the newest.
 */
async function historyColumns(client: pg.ClientBase): Promise<ReportColumn[]> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT a.attname AS name FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = 'bpf_stats.query_stats_history'::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped`,
  );
  const present = new Set(rows.map((r) => r.name));
  return METRIC_COLUMNS.filter((c) => present.has(c.column)).map((c) => ({
    column: c.column,
    unit: c.unit,
    alreadyCounted: 'alreadyCounted' in c && c.alreadyCounted === true,
    description: c.description,
  }));
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

function sums(row: Record<string, unknown>, prefix: string, columns: ReportColumn[]): PeriodSums {
  return Object.fromEntries(
    columns.map((c) => [
      c.column,
      row[prefix + c.column] === null || row[prefix + c.column] === undefined ? null : Number(row[prefix + c.column]),
    ]),
  );
}

/**
 * Reads what `report` shows from bpf_stats alone, in three statements over the history
 * tables' increments: per statement (the `limit` with the most time in the window), the totals,
 * and the time per bucket. A history row counts in the period its `ts` (the flush that wrote
 * it) falls in, so the periods' edges are as fine as `run --history-interval`.
 */
export async function readReport(client: pg.ClientBase, windows: ReportWindows, limit: number): Promise<ReportData> {
  const { rows: ready } = await client.query<{ ok: boolean }>(
    "SELECT pg_catalog.to_regclass('bpf_stats.query_stats_history') IS NOT NULL AND pg_catalog.has_schema_privilege('bpf_stats', 'USAGE') AS ok",
  );
  if (!ready[0]?.ok)
    throw new UserError('no bpf_stats history here: run `pg-bpf-stats run` against this database, or point --dsn where it writes');
  const { rows: any } = await client.query<{ some: boolean }>('SELECT EXISTS (SELECT 1 FROM bpf_stats.query_stats_history) AS some');
  if (!any[0]!.some)
    throw new UserError(
      'bpf_stats.query_stats_history is empty: the collector writes it every --history-interval (default 5 min) unless --history-retention off',
    );
  const columns = await historyColumns(client);
  const pgss = await statementsRelation(client);
  const { window, baseline } = windows;
  const params = [
    new Date(window.fromMs),
    new Date(window.toMs),
    baseline ? new Date(baseline.fromMs) : null,
    baseline ? new Date(baseline.toMs) : null,
  ];
  const inWindow = 'ts >= $1 AND ts < $2';
  const inBaseline = '$3::timestamptz IS NOT NULL AND ts >= $3 AND ts < $4';
  const aggregates = columns
    .flatMap((c) => [
      `pg_catalog.sum(${quoted(c.column)}) FILTER (WHERE in_window) AS ${quoted(`w_${c.column}`)}`,
      `pg_catalog.sum(${quoted(c.column)}) FILTER (WHERE NOT in_window) AS ${quoted(`b_${c.column}`)}`,
    ])
    .join(',\n           ');
  const periodRows = `SELECT *, (${inWindow}) AS in_window FROM bpf_stats.query_stats_history WHERE (${inWindow}) OR (${inBaseline})`;
  // The text: the collector's copy per node first (a sink's nodes each have their own), then
  // this database's pg_stat_statements for a statement whose text was not copied (yet). That one
  // is pg_stat_statements' own, and an older release's copy may predate the password test: both
  // go through it, on the whole text before it is cut, as the collector's copy does.
  const fullText = pgss ? 'coalesce(t.query, s.query)' : 't.query';
  const text = `CASE WHEN ${holdsPasswordSql(fullText)} THEN '${WITHHELD_TEXT}' ELSE pg_catalog.left(${fullText}, 1024) END`;
  const pgssJoin = pgss
    ? `LEFT JOIN ${pgss} s ON s.userid = k.userid AND s.dbid = k.dbid AND s.toplevel = k.toplevel AND s.queryid = k.queryid`
    : '';
  const perStatement = await client.query(
    `WITH h AS (${periodRows}),
     k AS (SELECT node, userid, dbid, toplevel, queryid,
           ${aggregates}
           FROM h GROUP BY node, userid, dbid, toplevel, queryid
           HAVING pg_catalog.bool_or(in_window)
           ORDER BY ${quoted(`w_${TOTAL_COLUMN}`)} DESC NULLS LAST LIMIT $5)
     SELECT k.*, k.queryid::text AS queryid_text, ${text} AS text
       FROM k LEFT JOIN bpf_stats.query_texts t ON t.node = k.node AND t.userid = k.userid AND t.dbid = k.dbid AND t.toplevel = k.toplevel AND t.queryid = k.queryid
       ${pgssJoin}
      ORDER BY ${quoted(`w_${TOTAL_COLUMN}`)} DESC NULLS LAST`,
    [...params, limit],
  );
  const totals = await client.query(
    `WITH h AS (${periodRows})
     SELECT ${aggregates},
            pg_catalog.count(DISTINCT (node, userid, dbid, toplevel, queryid)) FILTER (WHERE in_window) AS statements,
            pg_catalog.count(*) FILTER (WHERE NOT in_window) AS baseline_rows,
            pg_catalog.array_agg(DISTINCT node) AS nodes
       FROM h`,
    params,
  );
  const total = totals.rows[0]!;
  const statementsInWindow = Number(total.statements);
  const span = (r: TimeRange) => `${iso(r.fromMs)}..${iso(r.toMs)}`;
  if (statementsInWindow === 0)
    throw new UserError(
      `no history in the window ${span(window)}: nothing ran then, or it is older than the history retention (default 7 days)`,
    );
  if (baseline && Number(total.baseline_rows) === 0)
    throw new UserError(
      `no history in the baseline ${span(baseline)}: nothing ran then, or it is older than the history retention (default 7 days)`,
    );
  // Buckets as wide as the longer period / BUCKETS_PER_PERIOD, whole seconds, so both periods chart on one scale.
  const longest = Math.max(window.toMs - window.fromMs, baseline ? baseline.toMs - baseline.fromMs : 0);
  const bucketMs = Math.max(1000, Math.ceil(longest / BUCKETS_PER_PERIOD / 1000) * 1000);
  const timeColumns = columns.filter((c) => c.unit === 'ns');
  const bucketed = await client.query(
    `WITH h AS (${periodRows})
     SELECT in_window,
            pg_catalog.floor(pg_catalog.date_part('epoch', ts - CASE WHEN in_window THEN $1::timestamptz ELSE $3::timestamptz END) * 1000 / $5) AS bucket,
            ${timeColumns.map((c) => `pg_catalog.sum(${quoted(c.column)}) AS ${quoted(c.column)}`).join(', ')}
       FROM h GROUP BY 1, 2 ORDER BY 1, 2`,
    [...params, bucketMs],
  );
  const statementRows = perStatement.rows.map((r) => ({
    node: r.node as string,
    userid: Number(r.userid),
    dbid: Number(r.dbid),
    toplevel: r.toplevel as boolean,
    queryid: r.queryid_text as string,
  }));
  const latency = await readLatency(client, statementRows, params);
  const waitEvents = await readWaitEvents(client, statementRows, params);
  return {
    windows,
    columns,
    totals: { window: sums(total, 'w_', columns), baseline: baseline ? sums(total, 'b_', columns) : null },
    statementsInWindow,
    statements: perStatement.rows.map((r, i) => ({
      node: r.node,
      userid: Number(r.userid),
      dbid: Number(r.dbid),
      toplevel: r.toplevel,
      queryid: r.queryid_text,
      text: r.text === null || !mayHoldPassword(r.text) ? r.text : WITHHELD_TEXT,
      window: sums(r, 'w_', columns),
      baseline: baseline ? sums(r, 'b_', columns) : null,
      latency: latency.byKey?.get(latencyKey(statementRows[i]!)) ?? { window: null, baseline: null },
      waitEvents: waitEvents.get(latencyKey(statementRows[i]!)) ?? { window: {}, baseline: {} },
    })),
    buckets: bucketed.rows.map((r) => ({
      offsetMs: Number(r.bucket) * bucketMs,
      period: r.in_window ? 'window' : 'baseline',
      sums: sums(r, '', timeColumns),
    })),
    bucketMs,
    nodes: (total.nodes as string[] | null) ?? [],
    textSource: pgss ? `bpf_stats.query_texts, else ${pgss}` : 'bpf_stats.query_texts (pg_stat_statements is not installed here)',
    latencyHistory: latency.byKey !== null,
  };
}

type StatementKey = Pick<ReportStatement, 'node' | 'userid' | 'dbid' | 'toplevel' | 'queryid'>;

const latencyKey = (k: StatementKey) => `${k.node}/${k.userid}/${k.dbid}/${k.toplevel}/${k.queryid}`;

/** The listed statements' keys as a relation k(node, userid, dbid, toplevel, queryid), from parameters $5..$9 (listedKeyArrays). */
const LISTED_KEYS =
  'SELECT * FROM unnest($5::text[], $6::oid[], $7::oid[], $8::bool[], $9::int8[]) AS k(node, userid, dbid, toplevel, queryid)';

function listedKeyArrays(keys: StatementKey[]): unknown[] {
  return [
    keys.map((k) => k.node),
    keys.map((k) => k.userid),
    keys.map((k) => k.dbid),
    keys.map((k) => k.toplevel),
    keys.map((k) => k.queryid),
  ];
}

/** The percentiles the report shows. */
const QUANTILES = [0.5, 0.95, 0.99] as const;

/**
 * The listed statements' latency percentiles in each period: their query_latency histogram
 * history summed per bucket on the server (one row per statement, period and bucket that has
 * observations, whatever the number of intervals), the percentiles read from the sums as
 * bpf_stats.hist_quantile reads a histogram (within 10% from 16 us on: docs/percentiles.md). The
 * interpolation is closed by the largest max_so_far_ms of the period, a bound at least as large
 * as the period's own maximum. byKey null: no histogram history table here.
 */
async function readLatency(
  client: pg.ClientBase,
  keys: StatementKey[],
  params: Array<Date | null>,
): Promise<{ byKey: Map<string, ReportStatement['latency']> | null }> {
  const { rows: present } = await client.query<{ ok: boolean }>(
    "SELECT pg_catalog.to_regclass('bpf_stats.query_histogram_history') IS NOT NULL AS ok",
  );
  if (!present[0]?.ok) return { byKey: null };
  const byKey = new Map<string, ReportStatement['latency']>();
  if (!keys.length) return { byKey };
  const { rows } = await client.query<{
    node: string;
    userid: string;
    dbid: string;
    toplevel: boolean;
    queryid: string;
    in_window: boolean;
    bucket: number;
    count: string;
    max_ms: number;
  }>(
    `WITH k AS (${LISTED_KEYS})
     SELECT h.node, h.userid, h.dbid, h.toplevel, h.queryid::text AS queryid, (h.ts >= $1 AND h.ts < $2) AS in_window,
            u.bucket, pg_catalog.sum(u.count)::text AS count, pg_catalog.max(h.max_so_far_ms) AS max_ms
       FROM bpf_stats.query_histogram_history h
       JOIN k ON k.node = h.node AND k.userid = h.userid AND k.dbid = h.dbid AND k.toplevel = h.toplevel AND k.queryid = h.queryid,
            unnest(h.buckets, h.counts) AS u(bucket, count)
      WHERE h.kind = 'query_latency'
        AND ((h.ts >= $1 AND h.ts < $2) OR ($3::timestamptz IS NOT NULL AND h.ts >= $3 AND h.ts < $4))
      GROUP BY 1, 2, 3, 4, 5, 6, 7`,
    [...params, ...listedKeyArrays(keys)],
  );
  const periods = new Map<string, { counts: number[]; maxMs: number }>();
  for (const r of rows) {
    const id = `${latencyKey({ ...r, userid: Number(r.userid), dbid: Number(r.dbid) })}/${r.in_window}`;
    let period = periods.get(id);
    if (!period) {
      period = { counts: new Array<number>(KERNEL_LAYOUT.slots).fill(0), maxMs: 0 };
      periods.set(id, period);
    }
    if (r.bucket >= 0 && r.bucket < KERNEL_LAYOUT.slots) period.counts[r.bucket] = Number(r.count);
    period.maxMs = Math.max(period.maxMs, Number(r.max_ms));
  }
  const percentiles = (id: string): LatencyPercentiles | null => {
    const period = periods.get(id);
    if (!period) return null;
    const [p50, p95, p99] = QUANTILES.map((q) => quantileUs(KERNEL_LAYOUT, period.counts, q, period.maxMs * 1000));
    if (p50 == null || p95 == null || p99 == null) return null;
    const observations = period.counts.reduce((a, b) => a + b, 0);
    return { observations, p50Ms: p50 / 1000, p95Ms: p95 / 1000, p99Ms: p99 / 1000 };
  };
  for (const k of keys) {
    const key = latencyKey(k);
    byKey.set(key, { window: percentiles(`${key}/true`), baseline: percentiles(`${key}/false`) });
  }
  return { byKey };
}

/**
 * The listed statements' wait time per wait event in each period, from
 * bpf_stats.query_wait_event_stats_history (empty where a schema older than migration
 * 1764710000000 has no such table). The time without a wait event is left out, as `top` and the
 * views leave it out: on CPU and in the run queue are parts of their own, and a sleep without one
 * (reclaim waiting for writeback, a page fault's read) has no name to give; reclaim is named as
 * a detail where it grew.
 */
async function readWaitEvents(
  client: pg.ClientBase,
  keys: StatementKey[],
  params: Array<Date | null>,
): Promise<Map<string, ReportStatement['waitEvents']>> {
  const byKey = new Map<string, ReportStatement['waitEvents']>();
  const { rows: present } = await client.query<{ ok: boolean }>(
    "SELECT pg_catalog.to_regclass('bpf_stats.query_wait_event_stats_history') IS NOT NULL AS ok",
  );
  if (!present[0]?.ok || !keys.length) return byKey;
  const { rows } = await client.query<{
    node: string;
    userid: string;
    dbid: string;
    toplevel: boolean;
    queryid: string;
    in_window: boolean;
    event: string;
    ms: number;
  }>(
    `WITH k AS (${LISTED_KEYS})
     SELECT h.node, h.userid, h.dbid, h.toplevel, h.queryid::text AS queryid, (h.ts >= $1 AND h.ts < $2) AS in_window,
            h.wait_event_type || ':' || h.wait_event AS event, pg_catalog.sum(h.wait_time_ms)::float8 AS ms
       FROM bpf_stats.query_wait_event_stats_history h
       JOIN k ON k.node = h.node AND k.userid = h.userid AND k.dbid = h.dbid AND k.toplevel = h.toplevel AND k.queryid = h.queryid
      WHERE h.wait_event_type IS NOT NULL AND h.wait_event_type <> ''
        AND ((h.ts >= $1 AND h.ts < $2) OR ($3::timestamptz IS NOT NULL AND h.ts >= $3 AND h.ts < $4))
      GROUP BY 1, 2, 3, 4, 5, 6, 7`,
    [...params, ...listedKeyArrays(keys)],
  );
  for (const r of rows) {
    const key = latencyKey({ ...r, userid: Number(r.userid), dbid: Number(r.dbid) });
    let events = byKey.get(key);
    if (!events) {
      events = { window: {}, baseline: {} };
      byKey.set(key, events);
    }
    events[r.in_window ? 'window' : 'baseline'][r.event] = Number(r.ms);
  }
  return byKey;
}
