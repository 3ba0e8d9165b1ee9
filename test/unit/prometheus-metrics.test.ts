import { describe, expect, it } from 'vitest';
import { CatalogNames } from '../../src/exporters/prometheus/catalog-names.js';
import { FlushTotals } from '../../src/exporters/prometheus/flush-totals.js';
import { COLUMN_METRICS, columnMetric, cumulativeBuckets, formatLe } from '../../src/exporters/prometheus/metric-names.js';
import { parseMetricsAddress } from '../../src/exporters/prometheus/metrics-address.js';
import { MetricsRegistry } from '../../src/exporters/prometheus/metrics-registry.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import type { FlushReport } from '../../src/sidecar/sidecar.js';
import type { MetricValue } from '../../src/families/metric-values.js';

const col = (name: string) => METRIC_COLUMNS.findIndex((c) => c.column === name);

/** A flush row's values: only the given columns measured, times in ms, counts as bigints. */
function values(set: Record<string, number | bigint>): MetricValue[] {
  return METRIC_COLUMNS.map((c) => (c.column in set ? set[c.column]! : null));
}

function report(over: Partial<FlushReport>): FlushReport {
  return {
    at: new Date(1_700_000_000_000),
    ms: 12,
    queries: 0,
    backends: 0,
    error: null,
    queryRows: [],
    backendRows: [],
    histogramRows: [],
    waitEventRows: [],
    counters: {},
    fill: [],
    attached: ['cpu'],
    ...over,
  };
}

/** Names known without a database: what CatalogNames holds once it looked them up. */
function knownNames(): CatalogNames {
  const names = new CatalogNames(
    undefined,
    () => undefined,
    () => undefined,
    10,
  );
  Object.assign(names, { schedule: () => undefined });
  (names as unknown as { databases: Map<number, string> }).databases.set(5, 'shop');
  (names as unknown as { users: Map<number, string> }).users.set(10, 'app');
  return names;
}

describe('Prometheus names and units', () => {
  it('exports times in seconds and counts and bytes as _total counters', () => {
    expect(columnMetric({ column: 'on_cpu_ms', unit: 'ns' })).toMatchObject({ suffix: 'on_cpu_seconds_total', scale: 0.001 });
    expect(columnMetric({ column: 'blk_read_bytes', unit: 'count' })).toMatchObject({ suffix: 'blk_read_bytes_total', scale: 1 });
    expect(columnMetric({ column: 'calls', unit: 'count' })).toMatchObject({ suffix: 'calls_total', scale: 1 });
    expect(() => columnMetric({ column: 'on_cpu_ns', unit: 'ns' })).toThrow(/_ms/);
    // Every column: a valid metric name, no abbreviated unit left, each name once.
    const names = COLUMN_METRICS.map((m) => m.suffix);
    for (const name of names) {
      expect(name).toMatch(/^[a-z_][a-z0-9_]*_total$/);
      expect(name).not.toMatch(/_ms_|_ns_/);
    }
    expect(new Set(names).size).toBe(names.length);
    expect(names).toContain('total_time_seconds_total');
    expect(names).toContain('blk_write_bytes_total');
  });

  it("turns the kernel's log-linear microsecond slots into cumulative le buckets in seconds", () => {
    // Slots 0..15 are 1 us wide; two of them make one exported bucket (histogram-layout.test.ts has the rest).
    const slots = new Array(256).fill(0);
    slots[0] = 1;
    slots[2] = 2;
    slots[3] = 5;
    expect(cumulativeBuckets(slots).slice(0, 3)).toEqual([
      { le: 0.000002, count: 1 },
      { le: 0.000004, count: 8 },
      { le: 0.000006, count: 8 },
    ]);
    const all = cumulativeBuckets(new Array(256).fill(1));
    // The last finite bound ends slots 252-253 (14 << 30 us); slots 254-255 are only in +Inf.
    expect(all.at(-1)).toEqual({ le: (14 * 2 ** 30) / 1e6, count: 254 });
    expect(formatLe(0.000002)).toBe('0.000002');
    expect(formatLe(1.048576)).toBe('1.048576');
    expect(formatLe(Infinity)).toBe('+Inf');
  });
});

describe('--metrics-address', () => {
  it('reads HOST:PORT, [IPv6]:PORT and :PORT', () => {
    expect(parseMetricsAddress('127.0.0.1:9187')).toEqual({ host: '127.0.0.1', port: 9187 });
    expect(parseMetricsAddress('[::1]:0')).toEqual({ host: '::1', port: 0 });
    expect(parseMetricsAddress(':9187')).toEqual({ host: undefined, port: 9187 });
    expect(parseMetricsAddress('db-1.example:9187')).toEqual({ host: 'db-1.example', port: 9187 });
  });

  it('refuses anything else with one line naming the flag', () => {
    for (const bad of ['9187', 'localhost', 'host:99999', 'host:port', '::1:9187', '[nope]:1', 'a b:1', '']) {
      expect(() => parseMetricsAddress(bad), bad).toThrow(/^--metrics-address '.*': .* \(expected HOST:PORT, e\.g\. 127\.0\.0\.1:9187\)$/);
    }
  });
});

describe('FlushTotals', () => {
  it('adds committed increments in base units, summed over toplevel, per backend type', () => {
    const totals = new FlushTotals(1000);
    const row = (toplevel: boolean, ms: number, calls: bigint) => ({
      userid: 10,
      dbid: 5,
      toplevel,
      queryid: '-42',
      values: values({ total_time_ms: ms, on_cpu_ms: ms / 2, calls }),
    });
    totals.observe(report({ queryRows: [row(true, 1500, 3n), row(false, 500, 1n)] }));
    totals.observe(report({ queryRows: [row(true, 1000, 2n)] }));
    const [q] = totals.top(10);
    expect(q!.values[col('total_time_ms')]).toBeCloseTo(3, 9);
    expect(q!.values[col('on_cpu_ms')]).toBeCloseTo(1.5, 9);
    expect(q!.values[col('calls')]).toBe(6);
    // Not measured is not 0.
    expect(q!.values[col('llc_misses')]).toBeNull();
    totals.observe(
      report({
        backendRows: [
          {
            pid: 1,
            backendStartUs: 0n,
            backendType: 'checkpointer',
            datid: null,
            usesysid: null,
            queryid: null,
            cgroup: null,
            values: values({ io_wait_ms: 250 }),
            exitedAtUs: null,
          },
        ],
      }),
    );
    expect(totals.backendTypes.get('checkpointer')![col('io_wait_ms')]).toBe(0.25);
  });

  it('counts a failed flush and adds nothing from it', () => {
    const totals = new FlushTotals(1000);
    totals.observe(report({ error: 'connection refused', ms: 3000 }));
    expect(totals.health).toMatchObject({ failed: 1, succeeded: 0, lastError: 'connection refused', lastSeconds: 3, lastSuccessAt: null });
    totals.observe(report({}));
    expect(totals.health).toMatchObject({ failed: 1, succeeded: 1, lastError: null });
  });

  it('keeps a bounded number of statements, forgetting those with the least time', () => {
    const totals = new FlushTotals(100);
    for (let i = 1; i <= 1000; i++)
      totals.observe(
        report({ queryRows: [{ userid: 10, dbid: 5, toplevel: true, queryid: String(i), values: values({ total_time_ms: i }) }] }),
      );
    expect(totals.queries.size).toBeLessThanOrEqual(125);
    expect(totals.evictedQueries).toBe(1000 - totals.queries.size);
    expect(totals.top(3).map((q) => q.queryid)).toEqual(['1000', '999', '998']);
  });
});

describe('the /metrics text', () => {
  it('labels the top N statements as postgres_exporter does and writes histograms as le buckets', async () => {
    const totals = new FlushTotals(1000);
    totals.observe(
      report({
        queryRows: [1, 2, 3].map((i) => ({
          userid: 10,
          dbid: 5,
          toplevel: true,
          queryid: String(i),
          values: values({ total_time_ms: i * 1000, calls: BigInt(i) }),
        })),
        histogramRows: [
          {
            userid: 10,
            dbid: 5,
            toplevel: true,
            queryid: '1',
            kind: 'query_latency',
            counts: [0n, 2n, 1n, ...new Array(253).fill(0n)],
            maxMs: 0.005,
          },
        ],
        counters: { backends_full: 2n },
        fill: [{ map: 'queries', entries: 3, maxEntries: 8192 }],
      }),
    );
    const metrics = new MetricsRegistry(totals, knownNames(), { top: 2, queryText: false });
    metrics.prepareScrape();
    const text = await metrics.registry.metrics();
    const lines = text.split('\n');
    expect(lines).toContain('# TYPE pg_bpf_query_total_time_seconds_total counter');
    expect(lines).toContain('pg_bpf_query_total_time_seconds_total{queryid="3",datname="shop",user="app"} 3');
    expect(lines).toContain('pg_bpf_query_calls_total{queryid="2",datname="shop",user="app"} 2');
    // Only the top 2 by time; no text without --metrics-query-text.
    expect(text).not.toContain('queryid="1"');
    expect(text).not.toContain('pg_bpf_query_info');
    // Not measured: no series rather than a 0.
    expect(text).not.toMatch(/^pg_bpf_query_llc_misses_total\{/m);
    expect(lines).toContain('# TYPE pg_bpf_query_latency_seconds histogram');
    // Two observations in [1, 2) us, one in [2, 3) us; exported buckets are two kernel slots wide.
    expect(lines).toContain('pg_bpf_query_latency_seconds_bucket{datname="shop",le="0.000002"} 2');
    expect(lines).toContain('pg_bpf_query_latency_seconds_bucket{datname="shop",le="0.000004"} 3');
    expect(lines).toContain('pg_bpf_query_latency_seconds_bucket{datname="shop",le="0.000008"} 3');
    expect(lines).toContain('pg_bpf_query_latency_seconds_bucket{datname="shop",le="15032.385536"} 3');
    expect(lines).toContain('pg_bpf_query_latency_seconds_bucket{datname="shop",le="+Inf"} 3');
    expect(lines).toContain('pg_bpf_query_latency_seconds_count{datname="shop"} 3');
    expect(lines).toContain('pg_bpf_stats_up 1');
    expect(lines).toContain('pg_bpf_stats_dropped_events_total{kind="backends_full"} 2');
    expect(lines).toContain('pg_bpf_stats_map_max_entries{map="queries"} 8192');
    expect(lines).toContain('pg_bpf_stats_probe_set_attached{set="cpu"} 1');
    expect(lines).toContain('pg_bpf_stats_probe_set_attached{set="llc"} 0');
    expect(text).toMatch(/^process_cpu_seconds_total /m);
  });

  it('sums wait event time per database over statements and flushes, bounded, without the no-event rows', async () => {
    const totals = new FlushTotals(2);
    const row = (queryid: string, type: string, event: string, waits: bigint, waitMs: number) => ({
      userid: 10,
      dbid: 5,
      toplevel: true,
      queryid,
      waitEventType: type,
      waitEvent: event,
      waits,
      waitMs,
      runqMs: 0,
    });
    totals.observe(
      report({
        waitEventRows: [row('1', 'Lock', 'transactionid', 1n, 700), row('2', 'Lock', 'transactionid', 2n, 300), row('1', '', '', 3n, 5)],
      }),
    );
    totals.observe(report({ waitEventRows: [row('1', 'IPC', 'SyncRep', 4n, 1000), row('2', 'Lock', 'transactionid', 1n, 500)] }));
    const metrics = new MetricsRegistry(totals, knownNames(), { top: 2, queryText: false });
    metrics.prepareScrape();
    const lines = (await metrics.registry.metrics()).split('\n');
    expect(lines).toContain('pg_bpf_wait_event_seconds_total{datname="shop",wait_event_type="Lock",wait_event="transactionid"} 1.5');
    expect(lines).toContain('pg_bpf_wait_event_waits_total{datname="shop",wait_event_type="Lock",wait_event="transactionid"} 4');
    expect(lines).toContain('pg_bpf_wait_event_seconds_total{datname="shop",wait_event_type="IPC",wait_event="SyncRep"} 1');
    expect(lines.filter((l) => l.includes('wait_event_type=""'))).toEqual([]);
    // Bounded like the statements: past 1.25 × the bound the pairs with the least time go, counted.
    totals.observe(report({ waitEventRows: [row('3', 'Timeout', 'PgSleep', 1n, 1), row('3', 'IO', 'DataFileRead', 1n, 2)] }));
    expect(totals.waitEvents.size).toBe(2);
    expect(totals.evictedWaitEvents).toBe(2);
    expect([...totals.waitEvents.values()].map((w) => w.waitEvent).sort()).toEqual(['SyncRep', 'transactionid']);
  });

  it('holds a statement back until its names are known, so a series is born with its final labels', async () => {
    const totals = new FlushTotals(1000);
    totals.observe(report({ queryRows: [{ userid: 77, dbid: 5, toplevel: true, queryid: '9', values: values({ total_time_ms: 1 }) }] }));
    const metrics = new MetricsRegistry(totals, knownNames(), { top: 10, queryText: false });
    metrics.prepareScrape();
    expect(await metrics.registry.metrics()).not.toContain('queryid="9"');
  });
});
