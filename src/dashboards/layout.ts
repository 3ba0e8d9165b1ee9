import type * as cog from '@grafana/grafana-foundation-sdk/cog';
import type * as dashboard from '@grafana/grafana-foundation-sdk/dashboard';
import { PanelBuilder as TablePanel } from '@grafana/grafana-foundation-sdk/table';
import { PanelBuilder as TimeseriesPanel } from '@grafana/grafana-foundation-sdk/timeseries';
import { RowBuilder, type Dashboard, type DashboardBuilder } from '@grafana/grafana-foundation-sdk/dashboard';
import {
  LegendDisplayMode,
  LegendPlacement,
  StackingConfigBuilder,
  StackingMode,
  VizLegendOptionsBuilder,
} from '@grafana/grafana-foundation-sdk/common';

/*
 * The layout both dashboards share: the same rows and panels, with the same titles and units,
 * one on the PostgreSQL data source (bpf_stats) and one on Prometheus (/metrics). Each dashboard
 * gives every panel its queries (PanelQueries), so a panel missing on one side is a compile error.
 */

/** Time components as a rate: seconds spent per second of wall clock (the number of busy processes). */
export const SECONDS_PER_SECOND = 'suffix: s/s';

export interface PanelSpec {
  title: string;
  description: string;
  kind: 'timeseries' | 'table';
  /** Grafana unit of the values (the y axis of a time series, the value columns of a table). */
  unit: string;
  /** Label of the y axis (time series). */
  axisLabel?: string;
  stacked?: boolean;
  /** Grid width out of 24. */
  width: number;
  height?: number;
}

/** Components of a statement's time that partition it, as bpf_stats names them. */
export const COMPONENTS = [
  { key: 'on_cpu', label: 'on CPU' },
  { key: 'runq_wait', label: 'run queue' },
  { key: 'io_wait', label: 'block IO' },
  { key: 'lock_wait', label: 'lock' },
  { key: 'lwlock_wait', label: 'LWLock' },
  { key: 'other_wait', label: 'other wait' },
] as const;

/** Components a DBA ranks statements by: the partition's waits and reclaim (an overlay of it). */
export const RANKED_COMPONENTS = [
  { key: 'on_cpu', label: 'on CPU' },
  { key: 'runq_wait', label: 'run queue wait' },
  { key: 'io_wait', label: 'block IO wait' },
  { key: 'lock_wait', label: 'lock wait' },
  { key: 'lwlock_wait', label: 'LWLock wait' },
  { key: 'reclaim', label: 'memory reclaim' },
] as const;
export type RankedComponent = (typeof RANKED_COMPONENTS)[number]['key'];

const topPanels = Object.fromEntries(
  RANKED_COMPONENTS.map((c) => [
    `top_${c.key}`,
    {
      title: `Top statements by ${c.label}`,
      description: `The statements with the most ${c.label} time in the time range, with their text.`,
      kind: 'table',
      unit: 'ms',
      width: 12,
    } satisfies PanelSpec,
  ]),
) as Record<`top_${RankedComponent}`, PanelSpec>;

export const LAYOUT = {
  'Where the time went': {
    time_by_component: {
      title: 'Statement time by component',
      description:
        "Where the selected statements' time went, stacked: seconds per second of wall clock, i.e. how many backends were on CPU, waiting for a CPU, for block IO, for a lock, for an LWLock or for something else.",
      kind: 'timeseries',
      unit: SECONDS_PER_SECOND,
      axisLabel: 'busy backends (s/s)',
      stacked: true,
      width: 16,
    },
    backend_type_time: {
      title: 'Time by backend type',
      description:
        'Time of every PostgreSQL process, by backend type (client backends, autovacuum, checkpointer, ...), stacked: seconds per second.',
      kind: 'timeseries',
      unit: SECONDS_PER_SECOND,
      axisLabel: 'busy processes (s/s)',
      stacked: true,
      width: 8,
    },
  },
  'Top statements': {
    top_total: {
      title: 'Top statements by total time',
      description: 'The statements with the most time in the time range, each component of their time, and their text.',
      kind: 'table',
      unit: 'ms',
      width: 24,
      height: 10,
    },
    ...topPanels,
  },
  'Reclaim, IO and lock detail': {
    memory_stalls: {
      title: 'Memory stalls',
      description:
        'Time PostgreSQL processes spent in direct or memory-cgroup reclaim, in direct compaction, and throttled by writeback: seconds per second (probe sets memory, io).',
      kind: 'timeseries',
      unit: SECONDS_PER_SECOND,
      axisLabel: 'stalled processes (s/s)',
      width: 8,
    },
    reclaim_pages: {
      title: 'Pages reclaimed by PostgreSQL processes',
      description: 'Pages their own direct or memory-cgroup reclaim gave back, per second (probe set memory).',
      kind: 'timeseries',
      unit: 'suffix: pages/s',
      axisLabel: 'pages per second',
      width: 8,
    },
    block_io: {
      title: 'Block IO of PostgreSQL processes',
      description: 'Bytes read and written by block requests PostgreSQL processes issued, per second (probe set io).',
      kind: 'timeseries',
      unit: 'Bps',
      axisLabel: 'bytes per second',
      width: 8,
    },
    lock_waits: {
      title: 'Lock waits',
      description:
        'Heavyweight lock wait time by statement (and, from bpf_stats, by lock type, mode and relation; probe set locks for the detail).',
      kind: 'table',
      unit: 'ms',
      width: 12,
    },
    lwlock_waits: {
      title: 'LWLock waits',
      description: 'LWLock wait time by statement (and, from bpf_stats, by tranche and mode; probe set lwlock for the detail).',
      kind: 'table',
      unit: 'ms',
      width: 12,
    },
  },
  'Per backend type': {
    backend_type_components: {
      title: 'Backend types by component',
      description: "Each backend type's time in the time range, by component.",
      kind: 'table',
      unit: 'ms',
      width: 24,
    },
  },
  'Collector health': {
    health_status: {
      title: 'Collector status',
      description: "Each collector's last flush, its failures and what it could not count.",
      kind: 'table',
      unit: 's',
      width: 12,
    },
    dropped_events: {
      title: 'Dropped events by kind',
      description:
        'Events the BPF side could not count, by kind (bpf_stats.health.dropped), since the collector started. Any *_full kind means a map is too small.',
      kind: 'table',
      unit: 'short',
      width: 6,
    },
    map_fill: {
      title: 'BPF map fill',
      description: 'Entries in each bounded BPF map against its capacity.',
      kind: 'table',
      unit: 'percentunit',
      width: 6,
    },
  },
} as const satisfies Record<string, Record<string, PanelSpec>>;

type Rows = typeof LAYOUT;
export type PanelKey = { [R in keyof Rows]: keyof Rows[R] }[keyof Rows] & string;

/** One panel's queries and what the data source needs beyond the shared spec. */
export interface PanelQueries {
  targets: Array<cog.Builder<cog.Dataquery>>;
  /** Per-column units of a table, where they differ from the panel's unit. */
  columnUnits?: Record<string, string>;
  transformations?: dashboard.DataTransformerConfig[];
}

/**
 * Adds the rows and panels of LAYOUT to `dashboard` with one data source's queries, every panel
 * on `datasource`, rows open. `minInterval`: the shortest step of time series (on bpf_stats, the
 * history tables' interval). Returns the dashboard with its panels numbered.
 */
export function buildWithLayout(
  dashboard: DashboardBuilder,
  datasource: { type: string; uid: string },
  queries: Record<PanelKey, PanelQueries>,
  minInterval?: string,
): Dashboard {
  for (const [rowTitle, panels] of Object.entries(LAYOUT)) {
    dashboard.withRow(new RowBuilder(rowTitle).collapsed(false));
    for (const [key, spec] of Object.entries(panels) as Array<[PanelKey, PanelSpec]>) {
      const q = queries[key];
      if (spec.kind === 'timeseries') {
        const panel = new TimeseriesPanel()
          .title(spec.title)
          .description(spec.description)
          .datasource(datasource)
          .unit(spec.unit)
          .span(spec.width)
          .height(spec.height ?? 8)
          .targets(q.targets);
        panel
          .fillOpacity(spec.stacked ? 60 : 10)
          .lineWidth(1)
          .legend(new VizLegendOptionsBuilder().showLegend(true).displayMode(LegendDisplayMode.List).placement(LegendPlacement.Bottom));
        if (spec.axisLabel) panel.axisLabel(spec.axisLabel);
        if (spec.stacked) panel.stacking(new StackingConfigBuilder().mode(StackingMode.Normal));
        if (minInterval) panel.interval(minInterval);
        if (q.transformations) panel.transformations(q.transformations);
        dashboard.withPanel(panel);
      } else {
        const panel = new TablePanel()
          .title(spec.title)
          .description(spec.description)
          .datasource(datasource)
          .unit(spec.unit)
          .span(spec.width)
          .height(spec.height ?? 8)
          .targets(q.targets);
        for (const [column, unit] of Object.entries(q.columnUnits ?? {})) panel.overrideByName(column, [{ id: 'unit', value: unit }]);
        if (q.transformations) panel.transformations(q.transformations);
        dashboard.withPanel(panel);
      }
    }
  }
  const built = dashboard.build();
  // Grafana keys panel state (links, edits) by id: each its own.
  for (const [i, panel] of (built.panels ?? []).entries()) panel.id = i + 1;
  return built;
}
