import type * as cog from '@grafana/grafana-foundation-sdk/cog';
import {
  CustomVariableBuilder,
  DashboardBuilder,
  DashboardCursorSync,
  DatasourceVariableBuilder,
  QueryVariableBuilder,
  VariableHide,
  VariableRefresh,
  type Dashboard,
} from '@grafana/grafana-foundation-sdk/dashboard';
import { holdsPasswordSql, WITHHELD_TEXT } from '../password-text.js';
import { COMPONENTS, buildWithLayout, RANKED_COMPONENTS, type PanelKey, type PanelQueries, type RankedComponent } from './layout.js';

/*
 * The dashboard on Grafana's PostgreSQL data source: bpf_stats' history tables (per-flush
 * increments, so any time range sums them), joined with the query text the collector keeps in
 * bpf_stats.query_texts and, on the node itself, with pg_stat_statements. Every object is
 * schema-qualified: the panels run with whatever search_path Grafana's login role has. So is every
 * operator (OPERATOR(pg_catalog.=), ...): a bare one is looked up on that path too, and an operator a
 * plain role planted there (public./(float8, integer), where PUBLIC may create in public) is an
 * exact match where the catalog has none, and ran as the dashboard's role. Grafana's macros that
 * expand to operators the dashboard cannot qualify ($__timeFilter, $__timeGroup: numeric / integer)
 * are not used; test/unit/dashboards.test.ts finds any bare operator.
 */
// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's own variable syntax, filled in by Grafana
export const PG_DATASOURCE = { type: 'grafana-postgresql-datasource', uid: '${datasource}' };

/** A raw SQL query of the PostgreSQL data source (the SDK has no builder for it). */
export function sqlQuery(rawSql: string, format: 'time_series' | 'table', refId = 'A'): cog.Builder<cog.Dataquery> {
  const query = { refId, datasource: PG_DATASOURCE, editorMode: 'code', format, rawQuery: true, rawSql };
  return { build: () => query as unknown as cog.Dataquery };
}

/** The catalog's operator `name`, whatever the reader's search_path holds. */
const op = (name: string) => `OPERATOR(pg_catalog.${name})`;
const EQ = op('=');

/** `column` is one of a multi-value variable's values, or the variable is at All (its all value is '*'). */
function selected(column: string, variable: string): string {
  return `(${column}::text ${EQ} ANY (ARRAY[$${variable}]::text[]) OR '*'::text ${EQ} ANY (ARRAY[$${variable}]::text[]))`;
}

/** $__timeFilter(column), with the catalog's operators. */
const inRange = (column: string) => `${column} ${op('>=')} $__timeFrom()::timestamptz AND ${column} ${op('<=')} $__timeTo()::timestamptz`;
/** The bucket's width in seconds ($__interval, as $__interval_ms). */
const BUCKET_S = `($__interval_ms::numeric ${op('/')} 1000)`;
/** $__timeGroupAlias(column, $__interval) (the start of its bucket in epoch seconds), with the catalog's operators. */
const timeBucket = (column: string) =>
  `pg_catalog.floor(extract(epoch FROM ${column}) ${op('/')} ${BUCKET_S}) ${op('*')} ${BUCKET_S} AS "time"`;
/** `numerator / denominator`, NULL where the denominator is 0 (nullif() would look = up on the reader's path). */
const ratio = (numerator: string, denominator: string) =>
  `CASE WHEN ${denominator} ${op('<>')} 0 THEN ${numerator} ${op('/')} ${denominator} END`;
/** A statement's text, or the placeholder where it may hold a password (as the collector stores it; a row from an older release may not). */
const shownText = (column: string) => `CASE WHEN ${holdsPasswordSql(column)} THEN '${WITHHELD_TEXT}' ELSE ${column} END`;

const NODE = (column: string) => `${column} ${EQ} '$node'`;
const HISTORY_FILTER = `${NODE('h.node')} AND ${inRange('h.ts')} AND ${selected('h.dbid', 'database')} AND ${selected('h.queryid', 'queryid')}`;
const BACKEND_FILTER = `${NODE('b.node')} AND ${inRange('b.ts')}`;
/** ms per bucket / bucket ms: seconds per second. */
const PER_SECOND = `${op('/')} $__interval_ms`;
/** Per second of a bucket. */
const PER_BUCKET_SECOND = `${op('/')} ${BUCKET_S}`;
/** Same statement key in the relations `a` and `b`. */
const sameKey = (a: string, b: string) => ['userid', 'dbid', 'toplevel', 'queryid'].map((c) => `${a}.${c} ${EQ} ${b}.${c}`).join(' AND ');
/** Whether the dashboard's node is the server Grafana reads. */
const NODE_IS_LOCAL = `'$node'::text ${EQ} ANY (SELECT bpf_stats.local_nodes())`;

/** The selected statements' sums over the time range, by key (a CTE named w). */
const WINDOW_SUMS = `w AS (
  SELECT h.userid, h.dbid, h.toplevel, h.queryid, sum(h.calls) AS calls, sum(h.total_time_ms) AS total_time_ms,
         ${[...COMPONENTS.map((c) => c.key), 'reclaim'].map((k) => `sum(h.${k}_ms) AS ${k}_ms`).join(', ')}
    FROM bpf_stats.query_stats_history h
   WHERE ${HISTORY_FILTER}
   GROUP BY h.userid, h.dbid, h.toplevel, h.queryid
)`;
/** The text beside the id (the collector's copy, so a sink has it too). */
const TEXT = `LEFT JOIN bpf_stats.query_texts t
    ON ${NODE('t.node')} AND ${sameKey('t', 'w')}`;
/** pg_stat_statements' own figures, when the node is the server Grafana reads (in the extension's schema, $pgss). */
const PGSS = `LEFT JOIN $pgss.pg_stat_statements s
    ON ${sameKey('s', 'w')}
   AND ${NODE_IS_LOCAL}`;

function topBy(component: RankedComponent): PanelQueries {
  const label = RANKED_COMPONENTS.find((c) => c.key === component)!.label;
  return {
    targets: [
      sqlQuery(
        `WITH ${WINDOW_SUMS}
SELECT w.queryid::text AS "query id", ${shownText('t.query')} AS "query", w.${component}_ms AS "${label}",
       ${ratio(`w.${component}_ms`, 'w.total_time_ms')} AS "share of its time", w.total_time_ms AS "total time", w.calls AS "calls"
  FROM w ${TEXT}
 WHERE w.${component}_ms ${op('>')} 0
 ORDER BY w.${component}_ms DESC
 LIMIT 10`,
        'table',
      ),
    ],
    columnUnits: { 'query id': 'string', query: 'string', 'share of its time': 'percentunit', calls: 'short' },
  };
}

const QUERIES: Record<PanelKey, PanelQueries> = {
  time_by_component: {
    targets: [
      sqlQuery(
        `SELECT ${timeBucket('h.ts')},
       ${COMPONENTS.map((c) => `sum(h.${c.key}_ms) ${PER_SECOND} AS "${c.label}"`).join(',\n       ')}
  FROM bpf_stats.query_stats_history h
 WHERE ${HISTORY_FILTER}
 GROUP BY 1
 ORDER BY 1`,
        'time_series',
      ),
    ],
  },
  backend_type_time: {
    targets: [
      sqlQuery(
        `SELECT ${timeBucket('b.ts')}, b.backend_type AS metric, sum(b.total_time_ms) ${PER_SECOND} AS value
  FROM bpf_stats.backend_stats_history b
 WHERE ${BACKEND_FILTER}
 GROUP BY 1, 2
 ORDER BY 1`,
        'time_series',
      ),
    ],
  },
  top_total: {
    targets: [
      sqlQuery(
        `WITH ${WINDOW_SUMS}
SELECT w.queryid::text AS "query id", ${shownText('t.query')} AS "query", w.total_time_ms AS "total time", w.calls AS "calls",
       ${[...COMPONENTS, { key: 'reclaim', label: 'of which reclaim' }].map((c) => `w.${c.key}_ms AS "${c.label}"`).join(', ')},
       s.calls AS "calls (pg_stat_statements)", s.mean_exec_time AS "mean time (pg_stat_statements)", s.rows AS "rows (pg_stat_statements)"
  FROM w ${TEXT}
  ${PGSS}
 ORDER BY w.total_time_ms DESC NULLS LAST
 LIMIT 20`,
        'table',
      ),
    ],
    columnUnits: {
      'query id': 'string',
      query: 'string',
      calls: 'short',
      'calls (pg_stat_statements)': 'short',
      'rows (pg_stat_statements)': 'short',
    },
  },
  ...(Object.fromEntries(RANKED_COMPONENTS.map((c) => [`top_${c.key}`, topBy(c.key)])) as Record<`top_${RankedComponent}`, PanelQueries>),
  memory_stalls: {
    targets: [
      sqlQuery(
        `SELECT ${timeBucket('b.ts')}, sum(b.reclaim_ms) ${PER_SECOND} AS "reclaim",
       sum(b.compaction_stall_ms) ${PER_SECOND} AS "compaction", sum(b.writeback_throttle_ms) ${PER_SECOND} AS "writeback throttling"
  FROM bpf_stats.backend_stats_history b
 WHERE ${BACKEND_FILTER}
 GROUP BY 1
 ORDER BY 1`,
        'time_series',
      ),
    ],
  },
  reclaim_pages: {
    targets: [
      sqlQuery(
        `SELECT ${timeBucket('b.ts')}, sum(b.reclaim_pages) ${PER_BUCKET_SECOND} AS "pages reclaimed"
  FROM bpf_stats.backend_stats_history b
 WHERE ${BACKEND_FILTER}
 GROUP BY 1
 ORDER BY 1`,
        'time_series',
      ),
    ],
  },
  block_io: {
    targets: [
      sqlQuery(
        `SELECT ${timeBucket('b.ts')}, sum(b.blk_read_bytes) ${PER_BUCKET_SECOND} AS "read",
       sum(b.blk_write_bytes) ${PER_BUCKET_SECOND} AS "written"
  FROM bpf_stats.backend_stats_history b
 WHERE ${BACKEND_FILTER}
 GROUP BY 1
 ORDER BY 1`,
        'time_series',
      ),
    ],
  },
  lock_waits: {
    targets: [
      sqlQuery(
        `SELECT l.queryid::text AS "query id", ${shownText('l.query')} AS "query", l.locktype AS "lock type", l.mode AS "mode", l.relation AS "relation",
       l.waits AS "waits", l.wait_time_ms AS "wait time", l.mean_wait_ms AS "mean wait", l.stats_since AS "since"
  FROM bpf_stats.query_lock_detail l
 WHERE ${NODE('l.node')} AND ${selected('l.dbid', 'database')} AND ${selected('l.queryid', 'queryid')}
 ORDER BY l.wait_time_ms DESC NULLS LAST
 LIMIT 20`,
        'table',
      ),
    ],
    columnUnits: {
      'query id': 'string',
      query: 'string',
      'lock type': 'string',
      mode: 'string',
      relation: 'string',
      waits: 'short',
      since: 'dateTimeAsIso',
    },
  },
  lwlock_waits: {
    targets: [
      sqlQuery(
        `SELECT l.queryid::text AS "query id", ${shownText('l.query')} AS "query", l.tranche AS "tranche", l.mode AS "mode",
       l.waits AS "waits", l.wait_time_ms AS "wait time", l.mean_wait_ms AS "mean wait", l.stats_since AS "since"
  FROM bpf_stats.query_lwlock_detail l
 WHERE ${NODE('l.node')} AND ${selected('l.dbid', 'database')} AND ${selected('l.queryid', 'queryid')}
 ORDER BY l.wait_time_ms DESC NULLS LAST
 LIMIT 20`,
        'table',
      ),
    ],
    columnUnits: { 'query id': 'string', query: 'string', tranche: 'string', mode: 'string', waits: 'short', since: 'dateTimeAsIso' },
  },
  backend_type_components: {
    targets: [
      sqlQuery(
        `SELECT b.backend_type AS "backend type", sum(b.total_time_ms) AS "total time",
       ${[...COMPONENTS, { key: 'reclaim', label: 'of which reclaim' }].map((c) => `sum(b.${c.key}_ms) AS "${c.label}"`).join(', ')},
       sum(b.blk_read_bytes) AS "read", sum(b.blk_write_bytes) AS "written", count(DISTINCT (b.pid, b.backend_start)) AS "processes"
  FROM bpf_stats.backend_stats_history b
 WHERE ${BACKEND_FILTER}
 GROUP BY b.backend_type
 ORDER BY 2 DESC NULLS LAST`,
        'table',
      ),
    ],
    columnUnits: { 'backend type': 'string', read: 'bytes', written: 'bytes', processes: 'short' },
  },
  health_status: {
    targets: [
      sqlQuery(
        `SELECT h.host AS "host", h.pid AS "pid", h.version AS "version", pg_catalog.array_to_string(h.probe_sets, ', ') AS "probe sets",
       extract(epoch FROM pg_catalog.now() ${op('-')} h.last_flush_at)::float8 AS "last flush age", h.flush_ms ${op('/')} 1000 AS "last flush took",
       h.flushes AS "flushes", h.failed_flushes AS "failed flushes", h.dropped_events AS "dropped events",
       h.map_fill_pct ${op('/')} 100 AS "fullest map", h.pending_rows AS "pending rows", h.last_error AS "last error", h.stopped_at AS "stopped at"
  FROM bpf_stats.health h
 WHERE ${NODE('h.node')}
 ORDER BY h.updated_at DESC
 LIMIT 10`,
        'table',
      ),
    ],
    columnUnits: {
      host: 'string',
      pid: 'none',
      version: 'string',
      'probe sets': 'string',
      flushes: 'short',
      'failed flushes': 'short',
      'dropped events': 'short',
      'fullest map': 'percentunit',
      'pending rows': 'short',
      'last error': 'string',
      'stopped at': 'dateTimeAsIso',
    },
  },
  dropped_events: {
    targets: [
      sqlQuery(
        `SELECT d.key AS "kind", sum(d.value::bigint) AS "events"
  FROM bpf_stats.health h, pg_catalog.jsonb_each_text(h.dropped) d
 WHERE ${NODE('h.node')} AND h.stopped_at IS NULL
 GROUP BY d.key
 ORDER BY 2 DESC, 1`,
        'table',
      ),
    ],
    columnUnits: { kind: 'string' },
  },
  map_fill: {
    targets: [
      sqlQuery(
        `SELECT m.key AS "map", (m.value ${op('->>')} 'entries')::bigint AS "entries", (m.value ${op('->>')} 'max_entries')::bigint AS "capacity",
       ${ratio(`(m.value ${op('->>')} 'entries')::float8`, `(m.value ${op('->>')} 'max_entries')::float8`)} AS "fill"
  FROM bpf_stats.health h, pg_catalog.jsonb_each(h.map_fill) m
 WHERE ${NODE('h.node')} AND h.stopped_at IS NULL
 ORDER BY 4 DESC NULLS LAST, 1`,
        'table',
      ),
    ],
    columnUnits: { map: 'string', entries: 'short', capacity: 'short' },
  },
};

/** The dashboard's variables' queries, by name (tests run them too). */
export const SQL_VARIABLES = {
  node: `SELECT DISTINCT h.node FROM bpf_stats.health h ORDER BY 1`,
  database: `SELECT coalesce(d.datname, q.dbid::text) AS __text, q.dbid::text AS __value
  FROM (SELECT DISTINCT s.dbid FROM bpf_stats.query_stats s WHERE ${NODE('s.node')}) q
  LEFT JOIN pg_catalog.pg_database d ON d.oid ${EQ} q.dbid AND ${NODE_IS_LOCAL}
 ORDER BY 1`,
  queryid: `SELECT pg_catalog.concat(pg_catalog.left(pg_catalog.regexp_replace(${shownText('t.query')}, '\\s+', ' ', 'g'), 80), ' [', t.queryid, ']') AS __text, t.queryid::text AS __value
  FROM bpf_stats.query_texts t
 WHERE ${NODE('t.node')} AND ${selected('t.dbid', 'database')}
 ORDER BY t.last_seen DESC
 LIMIT 500`,
  pgss: `SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid ${EQ} e.extnamespace WHERE e.extname ${EQ} 'pg_stat_statements'`,
} as const;

export function sqlDashboard(): Dashboard {
  const variable = (name: keyof typeof SQL_VARIABLES, label: string) =>
    new QueryVariableBuilder(name)
      .label(label)
      .datasource(PG_DATASOURCE)
      .query(SQL_VARIABLES[name])
      .definition(SQL_VARIABLES[name])
      .refresh(VariableRefresh.OnTimeRangeChanged);
  const builder = new DashboardBuilder('pg-bpf-stats: where the time went (PostgreSQL)')
    .uid('pg-bpf-stats-sql')
    .description(
      "bpf_stats (pg-bpf-stats) on the PostgreSQL data source: where each statement's time went, top statements by component, reclaim, IO and lock detail, backend types and the collector's health.",
    )
    .tags(['pg-bpf-stats', 'postgresql', 'bpf'])
    .editable()
    .tooltip(DashboardCursorSync.Crosshair)
    .time({ from: 'now-6h', to: 'now' })
    .refresh('1m')
    .withVariable(new DatasourceVariableBuilder('datasource').label('Data source').type('grafana-postgresql-datasource'))
    .withVariable(
      new CustomVariableBuilder('history_interval')
        .label('History interval')
        .description("The collector's --history-interval (default 5m): the shortest step a graph can show.")
        .values('1m,5m,15m,1h')
        .current({ text: '5m', value: '5m' }),
    )
    .withVariable(variable('node', 'Node'))
    .withVariable(variable('database', 'Database').multi(true).includeAll(true).allValue("'*'"))
    .withVariable(variable('queryid', 'Query').multi(true).includeAll(true).allValue("'*'"))
    .withVariable(variable('pgss', 'pg_stat_statements schema').hide(VariableHide.HideVariable));
  return buildWithLayout(builder, PG_DATASOURCE, QUERIES, '$history_interval');
}
