import type * as cog from '@grafana/grafana-foundation-sdk/cog';
import {
  DashboardBuilder,
  DashboardCursorSync,
  DatasourceVariableBuilder,
  QueryVariableBuilder,
  VariableRefresh,
  type Dashboard,
  type DataTransformerConfig,
} from '@grafana/grafana-foundation-sdk/dashboard';
import { DataqueryBuilder, PromQueryFormat, QueryEditorMode } from '@grafana/grafana-foundation-sdk/prometheus';
import { COMPONENTS, buildWithLayout, RANKED_COMPONENTS, type PanelKey, type PanelQueries, type RankedComponent } from './layout.js';

/*
 * The same layout on Prometheus, over the collector's /metrics (src/exporters/prometheus/):
 * per-statement counters exist for the collector's top statements (--metrics-top), per backend
 * type for every process. The node is the scrape target's `instance`.
 */
// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's own variable syntax, filled in by Grafana
export const PROM_DATASOURCE = { type: 'prometheus', uid: '${datasource}' };

const STATEMENT = 'instance="$instance", datname=~"$datname", queryid=~"$queryid"';
const NODE = 'instance="$instance"';
const KEY = 'queryid, datname, user';

function range(expr: string, legend: string, refId: string): cog.Builder<cog.Dataquery> {
  return new DataqueryBuilder()
    .datasource(PROM_DATASOURCE)
    .editorMode(QueryEditorMode.Code)
    .range()
    .expr(expr)
    .legendFormat(legend)
    .refId(refId);
}

function instant(expr: string, refId: string): cog.Builder<cog.Dataquery> {
  return new DataqueryBuilder()
    .datasource(PROM_DATASOURCE)
    .editorMode(QueryEditorMode.Code)
    .instant()
    .format(PromQueryFormat.Table)
    .expr(expr)
    .refId(refId);
}

/** Adds the statement's text (pg_bpf_query_info, with --metrics-query-text) as a `query` label, keeping statements without one. */
function withText(expr: string): string {
  return `(${expr}) * on (${KEY}) group_left (query) max by (${KEY}, query) (pg_bpf_query_info{${NODE}})\n  or on (${KEY}) (${expr})`;
}

/** Milliseconds of a seconds counter over the dashboard's time range, per statement. */
function statementMs(metric: string): string {
  return `1000 * sum by (${KEY}) (increase(${metric}{${STATEMENT}}[$__range]))`;
}

/** Several instant queries as one table: joined on their labels, value columns named. */
function mergedTable(names: Record<string, string>): DataTransformerConfig[] {
  return [
    { id: 'merge', options: {} },
    {
      id: 'organize',
      options: {
        excludeByName: { Time: true },
        renameByName: Object.fromEntries(Object.entries(names).map(([refId, name]) => [`Value #${refId}`, name])),
      },
    },
  ];
}

const REF_IDS = 'ABCDEFGHIJKLMNOP';
/** The 20 statements with the most time in the range: the rows of the top table (each component's query keeps only them). */
const TOP_20 = `topk(20, ${statementMs('pg_bpf_query_total_time_seconds_total')})`;
const STATEMENT_COLUMNS = { queryid: 'string', query: 'string', datname: 'string', user: 'string' };

function topBy(component: RankedComponent): PanelQueries {
  const label = RANKED_COMPONENTS.find((c) => c.key === component)!.label;
  return {
    targets: [instant(withText(`topk(10, ${statementMs(`pg_bpf_query_${component}_seconds_total`)} > 0)`), 'A')],
    transformations: mergedTable({ A: label }),
    columnUnits: STATEMENT_COLUMNS,
  };
}

const QUERIES: Record<PanelKey, PanelQueries> = {
  time_by_component: {
    targets: COMPONENTS.map((c, i) =>
      range(`sum(rate(pg_bpf_query_${c.key}_seconds_total{${STATEMENT}}[$__rate_interval]))`, c.label, REF_IDS[i]!),
    ),
  },
  backend_type_time: {
    targets: [
      range(
        `sum by (backend_type) (rate(pg_bpf_backend_type_total_time_seconds_total{${NODE}}[$__rate_interval]))`,
        '{{backend_type}}',
        'A',
      ),
    ],
  },
  top_total: {
    targets: [
      instant(withText(TOP_20), 'A'),
      ...COMPONENTS.map((c, i) =>
        instant(`${statementMs(`pg_bpf_query_${c.key}_seconds_total`)} and on (${KEY}) ${TOP_20}`, REF_IDS[i + 1]!),
      ),
      instant(
        `sum by (${KEY}) (increase(pg_bpf_query_calls_total{${STATEMENT}}[$__range])) and on (${KEY}) ${TOP_20}`,
        REF_IDS[COMPONENTS.length + 1]!,
      ),
    ],
    transformations: [
      ...mergedTable({
        A: 'total time',
        ...Object.fromEntries(COMPONENTS.map((c, i) => [REF_IDS[i + 1]!, c.label])),
        [REF_IDS[COMPONENTS.length + 1]!]: 'calls',
      }),
      { id: 'sortBy', options: { sort: [{ field: 'total time', desc: true }] } },
    ],
    columnUnits: { ...STATEMENT_COLUMNS, calls: 'short' },
  },
  ...(Object.fromEntries(RANKED_COMPONENTS.map((c) => [`top_${c.key}`, topBy(c.key)])) as Record<`top_${RankedComponent}`, PanelQueries>),
  memory_stalls: {
    targets: [
      range(`sum(rate(pg_bpf_backend_type_reclaim_seconds_total{${NODE}}[$__rate_interval]))`, 'reclaim', 'A'),
      range(`sum(rate(pg_bpf_backend_type_compaction_stall_seconds_total{${NODE}}[$__rate_interval]))`, 'compaction', 'B'),
      range(`sum(rate(pg_bpf_backend_type_writeback_throttle_seconds_total{${NODE}}[$__rate_interval]))`, 'writeback throttling', 'C'),
    ],
  },
  reclaim_pages: {
    targets: [range(`sum(rate(pg_bpf_backend_type_reclaim_pages_total{${NODE}}[$__rate_interval]))`, 'pages reclaimed', 'A')],
  },
  block_io: {
    targets: [
      range(`sum(rate(pg_bpf_backend_type_blk_read_bytes_total{${NODE}}[$__rate_interval]))`, 'read', 'A'),
      range(`sum(rate(pg_bpf_backend_type_blk_write_bytes_total{${NODE}}[$__rate_interval]))`, 'written', 'B'),
    ],
  },
  lock_waits: {
    targets: [instant(withText(`topk(20, ${statementMs('pg_bpf_query_lock_wait_seconds_total')} > 0)`), 'A')],
    transformations: mergedTable({ A: 'wait time' }),
    columnUnits: STATEMENT_COLUMNS,
  },
  lwlock_waits: {
    targets: [instant(withText(`topk(20, ${statementMs('pg_bpf_query_lwlock_wait_seconds_total')} > 0)`), 'A')],
    transformations: mergedTable({ A: 'wait time' }),
    columnUnits: STATEMENT_COLUMNS,
  },
  backend_type_components: {
    targets: [
      instant(`1000 * sum by (backend_type) (increase(pg_bpf_backend_type_total_time_seconds_total{${NODE}}[$__range]))`, 'A'),
      ...[...COMPONENTS, { key: 'reclaim', label: 'of which reclaim' }].map((c, i) =>
        instant(`1000 * sum by (backend_type) (increase(pg_bpf_backend_type_${c.key}_seconds_total{${NODE}}[$__range]))`, REF_IDS[i + 1]!),
      ),
    ],
    transformations: mergedTable({
      A: 'total time',
      ...Object.fromEntries([...COMPONENTS, { key: 'reclaim', label: 'of which reclaim' }].map((c, i) => [REF_IDS[i + 1]!, c.label])),
    }),
    columnUnits: { backend_type: 'string' },
  },
  health_status: {
    targets: [
      instant(`pg_bpf_stats_last_flush_age_seconds{${NODE}}`, 'A'),
      instant(`pg_bpf_stats_last_flush_duration_seconds{${NODE}}`, 'B'),
      instant(`sum by (job, instance) (increase(pg_bpf_stats_flushes_total{${NODE}, result="error"}[$__range]))`, 'C'),
      instant(`pg_bpf_stats_up{${NODE}}`, 'D'),
    ],
    transformations: mergedTable({ A: 'last flush age', B: 'last flush took', C: 'failed flushes', D: 'last flush ok' }),
    columnUnits: { instance: 'string', job: 'string', 'failed flushes': 'short', 'last flush ok': 'bool' },
  },
  dropped_events: {
    targets: [instant(`sum by (kind) (pg_bpf_stats_dropped_events_total{${NODE}})`, 'A')],
    transformations: mergedTable({ A: 'events' }),
    columnUnits: { kind: 'string' },
  },
  map_fill: {
    targets: [instant(`pg_bpf_stats_map_entries{${NODE}} / on (job, instance, map) pg_bpf_stats_map_max_entries{${NODE}}`, 'A')],
    transformations: mergedTable({ A: 'fill' }),
    columnUnits: { map: 'string' },
  },
};

/** The dashboard's variables' queries (label_values of the data source). */
export const PROM_VARIABLES = {
  instance: 'label_values(pg_bpf_stats_up, instance)',
  datname: 'label_values(pg_bpf_query_total_time_seconds_total{instance="$instance"}, datname)',
  queryid: 'label_values(pg_bpf_query_total_time_seconds_total{instance="$instance", datname=~"$datname"}, queryid)',
} as const;

export function prometheusDashboard(): Dashboard {
  const variable = (name: keyof typeof PROM_VARIABLES, label: string) =>
    new QueryVariableBuilder(name)
      .label(label)
      .datasource(PROM_DATASOURCE)
      .query(PROM_VARIABLES[name])
      .definition(PROM_VARIABLES[name])
      .refresh(VariableRefresh.OnTimeRangeChanged);
  const builder = new DashboardBuilder('pg-bpf-stats: where the time went (Prometheus)')
    .uid('pg-bpf-stats-prometheus')
    .description(
      "pg-bpf-stats' /metrics on Prometheus: where each statement's time went, top statements by component, reclaim, IO and lock detail, backend types and the collector's health.",
    )
    .tags(['pg-bpf-stats', 'postgresql', 'bpf', 'prometheus'])
    .editable()
    .tooltip(DashboardCursorSync.Crosshair)
    .time({ from: 'now-6h', to: 'now' })
    .refresh('1m')
    .withVariable(new DatasourceVariableBuilder('datasource').label('Data source').type('prometheus'))
    .withVariable(variable('instance', 'Node'))
    .withVariable(variable('datname', 'Database').multi(true).includeAll(true).allValue('.*'))
    .withVariable(variable('queryid', 'Query id').multi(true).includeAll(true).allValue('.*'));
  return buildWithLayout(builder, PROM_DATASOURCE, QUERIES);
}
