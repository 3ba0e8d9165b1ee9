import client from 'prom-client';
import { PROBE_SETS } from '../../families/index.js';
import type { CatalogNames } from './catalog-names.js';
import type { FlushTotals, QueryTotals, WaitEventTotals } from './flush-totals.js';
import { COLUMN_METRICS, cumulativeBuckets, formatLe, HISTOGRAM_METRICS, PREFIX } from './metric-names.js';

type Labels = Record<string, string | number>;
interface Sample {
  labels: Labels;
  value: number;
  metricName?: string;
}

/** A metric whose samples are computed from memory at scrape time (prom-client calls get()). */
function computed(
  registry: client.Registry,
  name: string,
  type: 'counter' | 'gauge' | 'histogram',
  help: string,
  samples: () => Sample[],
): void {
  const metric = { name, help, type, get: async () => ({ name, help, type, values: samples(), aggregator: 'sum' }) };
  registry.registerMetric(metric as unknown as client.Metric);
}

export interface RegistryOptions {
  /** Per-query series are exported for this many statements, the ones with the most time. */
  top: number;
  /** Export `pg_bpf_query_info{..., query}` with the statement's text. */
  queryText: boolean;
}

/**
 * The registry of /metrics: the flush totals as counters and histograms, the collector's health,
 * and prom-client's default process metrics. Everything is read from memory: `prepareScrape()`
 * picks the top statements once per scrape; the metrics then only format them.
 *
 * @example
 * const metrics = new MetricsRegistry(totals, names, { top: 100, queryText: false });
 * metrics.prepareScrape();
 * const text = await metrics.registry.metrics();
 */
export class MetricsRegistry {
  readonly registry = new client.Registry();
  readonly flushDuration: client.Histogram;
  private top: Array<{ q: QueryTotals; labels: Labels }> = [];

  constructor(
    private readonly totals: FlushTotals,
    private readonly names: CatalogNames,
    private readonly options: RegistryOptions,
  ) {
    const r = this.registry;
    client.collectDefaultMetrics({ register: r });
    // prom-client names these gauges like counters; promtool (rightly) objects.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
      r.removeSingleMetric(name);

    COLUMN_METRICS.forEach((m, i) => {
      computed(
        r,
        `${PREFIX}_query_${m.suffix}`,
        'counter',
        `${m.description} Per statement (top ${options.top} by total time), since the collector started.`,
        () => this.top.flatMap(({ q, labels }) => (q.values[i] === null ? [] : [{ labels, value: q.values[i]! }])),
      );
    });
    COLUMN_METRICS.forEach((m, i) => {
      computed(
        r,
        `${PREFIX}_backend_type_${m.suffix}`,
        'counter',
        `${m.description} All processes of a backend type, since the collector started.`,
        () =>
          [...totals.backendTypes].flatMap(([type, values]) =>
            values[i] === null ? [] : [{ labels: { backend_type: type }, value: values[i]! }],
          ),
      );
    });
    if (options.queryText) {
      computed(r, `${PREFIX}_query_info`, 'gauge', 'The text of each exported statement (from pg_stat_statements), 1 per statement.', () =>
        this.top.flatMap(({ q, labels }) => {
          const text = names.text(q.userid, q.dbid, q.queryid);
          return typeof text === 'string' ? [{ labels: { ...labels, query: text }, value: 1 }] : [];
        }),
      );
    }
    for (const [kind, h] of Object.entries(HISTOGRAM_METRICS)) {
      computed(r, h.name, 'histogram', `${h.help} Log-linear buckets, 4 per power of two; no _sum (the kernel side keeps none).`, () =>
        this.histogramSamples(kind, h.name),
      );
    }

    const waitEvents = (value: (w: WaitEventTotals) => number) => (): Sample[] =>
      [...totals.waitEvents.values()].flatMap((w) => {
        const datname = this.names.database(w.dbid);
        return datname === undefined
          ? []
          : [{ labels: { datname, wait_event_type: w.waitEventType, wait_event: w.waitEvent }, value: value(w) }];
      });
    computed(
      r,
      `${PREFIX}_wait_event_seconds_total`,
      'counter',
      "Seconds statements of a database slept in each PostgreSQL wait event (named as pg_stat_activity names it), since the collector started; idle time between statements is in none. Bounded: past the exporter's statement bound the pairs with the least time are forgotten.",
      waitEvents((w) => w.seconds),
    );
    computed(
      r,
      `${PREFIX}_wait_event_waits_total`,
      'counter',
      'Sleeps of statements of a database in each PostgreSQL wait event, since the collector started.',
      waitEvents((w) => w.waits),
    );

    const health = totals.health;
    const s = `${PREFIX}_stats`;
    computed(r, `${s}_up`, 'gauge', '1 when the last flush to bpf_stats succeeded.', () => [
      { labels: {}, value: health.succeeded > 0 && health.lastError === null ? 1 : 0 },
    ]);
    computed(r, `${s}_last_flush_timestamp_seconds`, 'gauge', 'When the last successful flush began (Unix time).', () =>
      health.lastSuccessAt ? [{ labels: {}, value: health.lastSuccessAt.getTime() / 1000 }] : [],
    );
    computed(r, `${s}_last_flush_age_seconds`, 'gauge', 'Seconds since the last successful flush began.', () =>
      health.lastSuccessAt ? [{ labels: {}, value: (Date.now() - health.lastSuccessAt.getTime()) / 1000 }] : [],
    );
    computed(r, `${s}_last_flush_duration_seconds`, 'gauge', 'How long the last flush took.', () =>
      health.lastSeconds === null ? [] : [{ labels: {}, value: health.lastSeconds }],
    );
    computed(r, `${s}_flushes_total`, 'counter', 'Flushes, by result (ok, error).', () => [
      { labels: { result: 'ok' }, value: health.succeeded },
      { labels: { result: 'error' }, value: health.failed },
    ]);
    computed(r, `${s}_dropped_events_total`, 'counter', 'Events the BPF side could not count, by kind (bpf_stats.health.dropped).', () =>
      Object.entries(health.counters).map(([kind, n]) => ({ labels: { kind }, value: Number(n) })),
    );
    computed(r, `${s}_map_entries`, 'gauge', 'Entries in each BPF map at the last flush.', () =>
      health.fill.map((m) => ({ labels: { map: m.map }, value: m.entries })),
    );
    computed(r, `${s}_map_max_entries`, 'gauge', 'Capacity of each BPF map.', () =>
      health.fill.map((m) => ({ labels: { map: m.map }, value: m.maxEntries })),
    );
    computed(r, `${s}_probe_set_attached`, 'gauge', '1 for each probe set attached now, 0 for the others.', () =>
      Object.keys(PROBE_SETS).map((set) => ({ labels: { set }, value: health.attached.includes(set) ? 1 : 0 })),
    );
    computed(
      r,
      `${s}_tracked_statements`,
      'gauge',
      'Statements the exporter keeps totals for (bounded; the top N of them are exported).',
      () => [{ labels: {}, value: totals.queries.size }],
    );
    computed(
      r,
      `${s}_evicted_wait_events_total`,
      'counter',
      '(database, wait event) pairs forgotten because the exporter keeps a bounded number (the ones with the least time).',
      () => [{ labels: {}, value: totals.evictedWaitEvents }],
    );
    computed(
      r,
      `${s}_evicted_statements_total`,
      'counter',
      'Statements forgotten because the exporter keeps a bounded number (the ones with the least time).',
      () => [{ labels: {}, value: totals.evictedQueries }],
    );
    this.flushDuration = new client.Histogram({
      name: `${s}_flush_duration_seconds`,
      help: 'Flush durations: reading the BPF maps and writing bpf_stats.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [r],
    });
  }

  /** Picks the statements this scrape exports (once, for every per-query metric). */
  prepareScrape(): void {
    const top = this.totals.top(this.options.top);
    this.names.want(
      top.map((q) => q.dbid),
      top.map((q) => q.userid),
    );
    if (this.options.queryText) this.names.wantTexts(top);
    this.top = top.flatMap((q) => {
      const datname = this.names.database(q.dbid);
      const user = this.names.user(q.userid);
      // A series is born with its final labels: until the names are known, it waits a scrape.
      return datname === undefined || user === undefined ? [] : [{ q, labels: { queryid: q.queryid, datname, user } }];
    });
    const dbids = new Set([...this.totals.histograms.values(), ...this.totals.waitEvents.values()].map((h) => h.dbid));
    this.names.want(dbids, []);
  }

  private histogramSamples(kind: string, name: string): Sample[] {
    const samples: Sample[] = [];
    for (const h of this.totals.histograms.values()) {
      if (h.kind !== kind) continue;
      const datname = this.names.database(h.dbid);
      if (datname === undefined) continue;
      const buckets = cumulativeBuckets(h.slots);
      const total = buckets.at(-1)?.count ?? 0;
      for (const b of buckets) samples.push({ metricName: `${name}_bucket`, labels: { datname, le: formatLe(b.le) }, value: b.count });
      samples.push({ metricName: `${name}_bucket`, labels: { datname, le: '+Inf' }, value: total });
      samples.push({ metricName: `${name}_count`, labels: { datname }, value: total });
    }
    return samples;
  }
}
