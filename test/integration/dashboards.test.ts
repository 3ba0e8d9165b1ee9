import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { LAYOUT, type PanelKey } from '../../src/dashboards/layout.js';
import { PROM_VARIABLES, prometheusDashboard } from '../../src/dashboards/prometheus-dashboard.js';
import { SQL_VARIABLES, sqlDashboard } from '../../src/dashboards/sql-dashboard.js';
import { cliPath, packageRoot } from '../../src/package-root.js';
import { backendPid } from '../../src/storage/backend-pid.js';
import { WITHHELD_TEXT } from '../../src/password-text.js';
import { expandSqlMacros, interpolate, parseDuration, type QueryContext, type VariableSelection } from '../support/grafana-macros.js';
import { OPERATOR_NAMES, operatorNamesIn, plantOperators } from '../support/planted-operators.js';

// biome-ignore lint/suspicious/noExplicitAny: Grafana's and Prometheus' JSON, read field by field as the test needs
type Json = Record<string, any>;

/*
 * Every query of the shipped dashboards and every metric name of the shipped alerting rules,
 * run against the real thing: one throwaway cluster with pg_stat_statements, one collector
 * (every probe set that runs here, history every second, /metrics with query text), one
 * Prometheus scraping it every second with our rules loaded, and a workload that makes each
 * component: CPU on more backends than cores (run-queue waits), a lock held while another
 * statement waits for it, and a cold scan inside a memory cgroup smaller than the table (block
 * IO and memcg reclaim). SQL panels run with Grafana's macros and variables expanded
 * (test/support/grafana-macros.ts); PromQL panels are evaluated by that Prometheus. Grafana
 * itself is not run. Ground truth for "the workload made some": pg_stat_statements and
 * pg_locks saw the statements and the wait; the memory cgroup's failcnt saw the limit hit.
 *
 * The panels run as Grafana's role would: a pg_monitor member with the default search_path
 * ("$user", public), on a cluster where PUBLIC may create in public (PostgreSQL 14's default,
 * kept by clusters upgraded from it). At the end a plain role plants an operator for every
 * operator name the panels use and every pair of operand types, and every panel runs again.
 */
const cli = cliPath();
const CPU_STATEMENT = 'SELECT count(*) FROM generate_series(1, 300000) AS dashboard_cpu';
const LOCKED_STATEMENT = 'SELECT count(*) FROM public.dash_locked AS dashboard_lock';
const COLD_STATEMENT = 'SELECT sum(length(pad)) FROM public.dash_cold AS dashboard_cold';
const SECRET = 'hunter2-Dash9Q';
/** A statement with figures (CPU) whose text holds a password: pg_stat_statements keeps a utility statement's text as sent. */
const SETS_PASSWORD = `DO $$ BEGIN PERFORM count(*) FROM generate_series(1, 3000000); PERFORM 'host=db password=${SECRET}'; END $$`;
const MB = 1024 * 1024;
const COLD_LIMIT = 16 * MB;

let cluster: ThrowawayCluster;
let admin: pg.Client;
/** What Grafana's data source logs in as: pg_monitor, the default search_path. */
let grafana: pg.Client;
let collector: ChildProcess | null = null;
let collectorLog = '';
let prometheus: ChildProcess | null = null;
let promDir = '';
let metricsUrl = '';
let promUrl = '';
let instance = '';
let node = '';
let windowStart = new Date();
let coldPeakBytes = 0;
let lockWaitsSeen = 0;
let coldRelationBytes = 0;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function until<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function promApi(
  path: string,
  params: Record<string, string | number>,
): Promise<Array<{ metric: Record<string, string>; value?: [number, string]; values?: Array<[number, string]> }>> {
  const query = Object.entries(params)
    .map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`)
    .join('&');
  const body = (await (await fetch(`${promUrl}${path}?${query}`)).json()) as {
    status: string;
    data: { result: Array<{ metric: Record<string, string>; value?: [number, string]; values?: Array<[number, string]> }> };
    error?: string;
  };
  if (body.status !== 'success') throw new Error(`${params.query}: ${body.error}`);
  return body.data.result;
}

async function connect(): Promise<pg.Client> {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  return client;
}

/** CPU_STATEMENT on `clients` connections at once for `ms` (more than the cores: run-queue waits); statements run. */
async function cpuLoad(clients: number, ms: number): Promise<number> {
  const counts = await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = await connect();
      let n = 0;
      try {
        for (const end = Date.now() + ms; Date.now() < end; n++) await client.query(CPU_STATEMENT);
      } finally {
        await client.end();
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

/** A session holds dash_locked while another reads it, `times` times; pg_locks sees each wait. */
async function lockWaits(times: number): Promise<number> {
  const holder = await connect();
  const waiter = await connect();
  const waiterPid = backendPid(waiter);
  let seen = 0;
  try {
    for (let i = 0; i < times; i++) {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE public.dash_locked IN ACCESS EXCLUSIVE MODE');
      const read = waiter.query(LOCKED_STATEMENT);
      await until(
        'the reader waiting in pg_locks',
        async () => (await admin.query('SELECT 1 FROM pg_catalog.pg_locks WHERE pid = $1 AND NOT granted', [waiterPid])).rowCount,
      );
      seen++;
      await new Promise((r) => setTimeout(r, 600));
      await holder.query('COMMIT');
      await read;
    }
  } finally {
    await holder.end();
    await waiter.end();
  }
  return seen;
}

/**
 * Cold scans of dash_cold (about 3 times the limit) by a backend in a memory cgroup: the
 * cgroup's peak usage at its limit means the kernel had to reclaim to read the rest. Under a
 * loaded machine a scan sometimes charged the cgroup far less than it read (7 of 48 MB, cause
 * not found), and three scans then never reached the limit: more scans follow, up to `most`,
 * until the cgroup's own failcnt says a charge met the limit (reclaim ran).
 */
async function coldScans(path: string, times: number, most: number): Promise<void> {
  const client = await connect();
  const cgroup = MemoryCgroup.create('pgbpf-dashboards', COLD_LIMIT);
  try {
    cgroup.add(backendPid(client));
    for (let i = 0; i < most && (i < times || cgroup.failcnt() === 0); i++) {
      evictFromPageCache(path);
      await client.query(COLD_STATEMENT);
    }
    coldPeakBytes = Number(readFileSync(join(cgroup.dir, 'memory.max_usage_in_bytes'), 'utf8'));
  } finally {
    // Moved back while the backend lives: an exiting process can hold the cgroup a moment (EBUSY).
    cgroup.remove();
    await client.end();
  }
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ settings: { shared_buffers: "'16MB'" } });
  admin = await connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query("CREATE TABLE public.dash_cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 200000) g");
  await admin.query('VACUUM (FREEZE) public.dash_cold');
  await admin.query('CREATE TABLE public.dash_locked (id int)');
  await admin.query('CREATE ROLE grafana LOGIN IN ROLE pg_monitor; CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO PUBLIC');
  await admin.query('CHECKPOINT');
  coldRelationBytes = Number((await admin.query("SELECT pg_relation_size('public.dash_cold') AS n")).rows[0].n);
  const coldPath = join(cluster.dataDir, (await admin.query("SELECT pg_relation_filepath('public.dash_cold') AS p")).rows[0].p);

  windowStart = new Date();
  collector = spawn(
    process.execPath,
    [
      cli,
      'run',
      '--dsn',
      cluster.connectionString(),
      '--metrics-address',
      '127.0.0.1:0',
      '--metrics-query-text',
      '--history-interval',
      '1s',
      '--probes',
      'cpu,io,memory,query,locks,lwlock',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  collector.stderr!.on('data', (d: Buffer) => (collectorLog += d.toString()));
  const port = await until(
    'the metrics address in the log',
    async () => /metrics at http:\/\/127\.0\.0\.1:(\d+)\/metrics/.exec(collectorLog)?.[1],
  );
  instance = `127.0.0.1:${port}`;
  metricsUrl = `http://${instance}/metrics`;
  await until('the first flush', async () => (await (await fetch(metricsUrl)).text()).includes('pg_bpf_stats_up 1'));
  node = (await admin.query('SELECT node FROM bpf_stats.health')).rows[0].node;

  promDir = mkdtempSync(join(tmpdir(), 'pgbpf-dashboards-'));
  const promPort = await freePort();
  promUrl = `http://127.0.0.1:${promPort}`;
  // The job name the shipped rules expect.
  writeFileSync(
    join(promDir, 'prometheus.yml'),
    `global: { scrape_interval: 1s, evaluation_interval: 1s }\nrule_files: ['${join(packageRoot(), 'deploy', 'prometheus', 'pg-bpf-stats.rules.yml')}']\n` +
      `scrape_configs:\n  - job_name: pg-bpf-stats\n    static_configs: [{ targets: ['${instance}'] }]\n`,
  );
  prometheus = spawn(
    'prometheus',
    [
      `--config.file=${join(promDir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(promDir, 'data')}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
    ],
    { stdio: 'ignore' },
  );
  await until('Prometheus ready', async () => (await fetch(`${promUrl}/-/ready`)).ok);
  await until('a first scrape', async () => (await promApi('/api/v1/query', { query: 'up{job="pg-bpf-stats"} == 1' })).length);

  // Each statement once, unhindered, until Prometheus has its series: a counter's increase
  // counts from its first sample, so the workload that follows is all seen.
  for (const statement of [CPU_STATEMENT, LOCKED_STATEMENT, COLD_STATEMENT]) await admin.query(statement);
  await until(
    'the statements in Prometheus',
    async () => (await promApi('/api/v1/query', { query: 'pg_bpf_query_info{query=~".*dashboard_(cpu|lock|cold).*"}' })).length === 3,
  );
  [, lockWaitsSeen] = await Promise.all([cpuLoad(3, 6000), lockWaits(3), coldScans(coldPath, 3, 8)]);
  await admin.query(SETS_PASSWORD);
  grafana = new pg.Client(cluster.connectionString().replace('postgres@', 'grafana@'));
  await grafana.connect();
  // The last flush, its history row and a scrape after it.
  await new Promise((r) => setTimeout(r, 4000));
}, 120_000);

afterAll(async () => {
  collector?.kill('SIGTERM');
  prometheus?.kill('SIGTERM');
  await Promise.all([collector, prometheus].map((p) => (p && p.exitCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
  if (promDir) rmSync(promDir, { recursive: true, force: true });
  await grafana?.end();
  await admin?.end();
  await cluster?.stop();
});

/** Each panel's target queries, by panel key (LAYOUT order: the panels' order in the JSON). */
function panelTargets(dashboard: ReturnType<typeof sqlDashboard>): Map<PanelKey, Array<Json>> {
  const keys = Object.values(LAYOUT).flatMap((row) => Object.keys(row)) as PanelKey[];
  const panels = (dashboard.panels ?? []).filter((p) => p.type !== 'row') as Array<{
    targets?: Array<Json>;
    interval?: string;
  }>;
  expect(panels).toHaveLength(keys.length);
  return new Map(keys.map((k, i) => [k, panels[i]!.targets!]));
}

const ALL: VariableSelection = { values: [], multi: true, includeAll: true, all: true };

describe('the workload made each component (ground truth)', () => {
  it('ran its statements, waited for the lock and hit the memory limit', async () => {
    const { rows } = await admin.query<{ query: string; calls: string }>(
      "SELECT query, calls::text FROM pg_stat_statements WHERE query LIKE '%dashboard_cpu%' OR query LIKE '%dashboard_lock%' OR query LIKE '%dashboard_cold%'",
    );
    expect(rows).toHaveLength(3);
    // More than the limit was read through the page cache, and the cgroup reached its limit.
    expect(coldRelationBytes).toBeGreaterThan(2 * COLD_LIMIT);
    expect(coldPeakBytes).toBeGreaterThan(0.9 * COLD_LIMIT);
    const waits = (await admin.query("SELECT sum(calls) AS n FROM pg_stat_statements WHERE query LIKE '%dashboard_lock%'")).rows[0].n;
    expect(Number(waits)).toBeGreaterThanOrEqual(1 + lockWaitsSeen);
    expect(lockWaitsSeen).toBe(3);
  });
});

describe('metric names', () => {
  it('every pg_bpf_ metric the rules and the Prometheus dashboard use is exposed by a real collector', async () => {
    const rules = parse(readFileSync(join(packageRoot(), 'deploy', 'prometheus', 'pg-bpf-stats.rules.yml'), 'utf8')) as {
      groups: Array<{ rules: Array<{ expr: string }> }>;
    };
    const exprs = [
      ...rules.groups.flatMap((g) => g.rules.map((r) => r.expr)),
      ...[...panelTargets(prometheusDashboard()).values()].flat().map((t) => t.expr as string),
      ...Object.values(PROM_VARIABLES),
    ];
    const names = new Set(exprs.flatMap((e) => [...e.matchAll(/\b(pg_bpf_\w+)/g)].map((m) => m[1]!)));
    expect(names.size).toBeGreaterThan(20);
    const exposed = new Set(
      (await (await fetch(metricsUrl)).text())
        .split('\n')
        .filter((l) => l && !l.startsWith('#'))
        .map((l) => /^[^{ ]+/.exec(l)![0]),
    );
    expect(
      [...names].filter((n) => !exposed.has(n)),
      'used but not exposed',
    ).toEqual([]);
    // `up` is Prometheus' own, for the job name the rules expect.
    expect(await promApi('/api/v1/query', { query: 'up{job="pg-bpf-stats"}' })).toHaveLength(1);
  });

  it('the rules load into the real Prometheus and evaluate without error', async () => {
    const rules = await until('every rule evaluated', async () => {
      const body = (await (await fetch(`${promUrl}/api/v1/rules`)).json()) as {
        data: { groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }> };
      };
      const all = body.data.groups.flatMap((g) => g.rules);
      return all.length && all.every((r) => r.health !== 'unknown') ? all : undefined;
    });
    expect(rules).toHaveLength(9);
    for (const rule of rules) expect(rule.health, `${rule.name}: ${rule.lastError}`).toBe('ok');
  });
});

/** The window and variables every panel's query is expanded with: this node, every database and statement. */
function panelContext(pgss: string): QueryContext {
  return {
    from: new Date(windowStart.getTime() - 10_000),
    to: new Date(),
    maxDataPoints: 100,
    minIntervalMs: 0,
    variables: {
      node: { values: [node] },
      database: { ...ALL, allValue: "'*'" },
      queryid: { ...ALL, allValue: "'*'" },
      pgss: { values: [pgss] },
      history_interval: { values: ['1s'] },
    },
  };
}

/** Panels that may be empty: only when the collector saw none of what they show (LWLock waits are not provoked). */
const MAY_BE_EMPTY: ReadonlySet<PanelKey> = new Set(['top_lwlock_wait', 'lwlock_waits', 'dropped_events']);

describe('SQL panels, with Grafana macros and variables expanded', () => {
  let context: QueryContext;
  beforeAll(async () => {
    const pgss = (await admin.query(SQL_VARIABLES.pgss)).rows[0]!.quote_ident as string;
    context = panelContext(pgss);
  });

  async function runPanel(target: Json, interval: string | undefined, ctx = context): Promise<Array<Json>> {
    const minIntervalMs = interval ? parseDuration(interpolate(interval, 'sql', ctx)) : 0;
    const c = { ...ctx, minIntervalMs };
    const sql = expandSqlMacros(interpolate(target.rawSql as string, 'sql', c), c);
    expect(sql).not.toMatch(/\$\w/);
    return (await grafana.query(sql)).rows;
  }

  it('the variables list this node, its databases, the workload statements and pg_stat_statements', async () => {
    const vars = { ...context.variables };
    const run = async (sql: string) => (await grafana.query(interpolate(sql, 'sql', { ...context, variables: vars }))).rows;
    expect((await run(SQL_VARIABLES.node)).map((r) => r.node)).toEqual([node]);
    expect((await run(SQL_VARIABLES.database)).map((r) => r.__text)).toContain('postgres');
    expect((await run(SQL_VARIABLES.queryid)).some((r) => r.__text.includes('dashboard_cold'))).toBe(true);
    expect(context.variables.pgss!.values[0]).toBe('public');
  });

  it('every panel returns rows, with the component the workload made', async () => {
    const dashboard = sqlDashboard();
    const panels = (dashboard.panels ?? []).filter((p) => p.type !== 'row') as Array<{
      title: string;
      interval?: string;
      targets: Array<Json>;
    }>;
    const lwlockSeen =
      Number((await admin.query('SELECT coalesce(sum(lwlock_wait_ms), 0) AS ms FROM bpf_stats.query_stats')).rows[0].ms) > 0;
    const results = new Map<PanelKey, Array<Json>>();
    const keys = [...panelTargets(dashboard).keys()];
    for (const [i, panel] of panels.entries()) {
      const rows = await runPanel(panel.targets[0]!, panel.interval);
      results.set(keys[i]!, rows);
      if (panel.targets[0]!.format === 'time_series') {
        // Grafana's time series format: a "time" column (epoch seconds here), inside the range.
        for (const row of rows) {
          expect(Number(row.time) * 1000, panel.title).toBeGreaterThanOrEqual(context.from.getTime() - 60_000);
          expect(Number(row.time) * 1000, panel.title).toBeLessThanOrEqual(context.to.getTime());
        }
      }
      if (!MAY_BE_EMPTY.has(keys[i]!) || (keys[i]!.includes('lwlock') && lwlockSeen)) expect(rows.length, panel.title).toBeGreaterThan(0);
      console.log(`SQL  ${panel.title}: ${rows.length} rows`);
    }
    const positive = (key: PanelKey, column: string) =>
      expect(
        results.get(key)!.some((r) => Number(r[column]) > 0),
        `${key}: ${column} > 0`,
      ).toBe(true);
    for (const column of ['on CPU', 'run queue', 'block IO', 'lock']) positive('time_by_component', column);
    expect(results.get('backend_type_time')!.some((r) => r.metric === 'client backend' && r.value > 0)).toBe(true);
    expect(results.get('top_total')!.map((r) => r.query)).toEqual(
      expect.arrayContaining([expect.stringContaining('dashboard_cpu'), expect.stringContaining('dashboard_cold')]),
    );
    expect(
      Number(results.get('top_total')!.find((r) => String(r.query).includes('dashboard_cpu'))!['calls (pg_stat_statements)']),
    ).toBeGreaterThan(0);
    expect(results.get('top_on_cpu')![0]!.query).toContain('dashboard_cpu');
    expect(results.get('top_io_wait')!.some((r) => String(r.query).includes('dashboard_cold'))).toBe(true);
    expect(results.get('top_lock_wait')![0]!.query).toContain('dashboard_lock');
    expect(results.get('top_reclaim')!.some((r) => String(r.query).includes('dashboard_cold'))).toBe(true);
    positive('memory_stalls', 'reclaim');
    positive('reclaim_pages', 'pages reclaimed');
    positive('block_io', 'read');
    expect(results.get('lock_waits')!.find((r) => String(r.query).includes('dashboard_lock'))?.relation).toBe('dash_locked');
    expect(results.get('backend_type_components')!.map((r) => r['backend type'])).toContain('client backend');
    expect(results.get('health_status')![0]!['last flush age']).toBeLessThan(5);
    expect(results.get('map_fill')!.map((r) => r.map)).toContain('queries');
  });

  it('a selected query narrows the panels to it', async () => {
    const queryid = (await admin.query("SELECT queryid::text FROM pg_stat_statements WHERE query LIKE '%dashboard_cold%'")).rows[0]
      .queryid as string;
    const narrowed = { ...context, variables: { ...context.variables, queryid: { values: [queryid], multi: true, includeAll: true } } };
    const top = panelTargets(sqlDashboard()).get('top_total')![0]!;
    const rows = await runPanel(top, undefined, narrowed);
    expect(rows.map((r) => r['query id'])).toEqual([queryid]);
  });

  it('never shows a text that may hold a password, also one bpf_stats.query_texts holds in full (a release before the password test wrote it)', async () => {
    const { rows: keys } = await admin.query(
      "SELECT queryid::text AS queryid, query FROM pg_stat_statements WHERE query LIKE 'DO $$ BEGIN PERFORM count(*)%'",
    );
    expect(keys).toHaveLength(1);
    const queryid = keys[0].queryid as string;
    expect(keys[0].query).toContain(SECRET);
    // The collector stored the placeholder; an older release's row holds the text itself.
    expect((await admin.query('SELECT query FROM bpf_stats.query_texts WHERE queryid = $1', [queryid])).rows.map((r) => r.query)).toEqual([
      WITHHELD_TEXT,
    ]);
    await admin.query(
      'UPDATE bpf_stats.query_texts t SET query = s.query FROM pg_stat_statements s WHERE t.queryid = s.queryid AND s.queryid = $1',
      [queryid],
    );
    try {
      const narrowed = { ...context, variables: { ...context.variables, queryid: { values: [queryid], multi: true, includeAll: true } } };
      const dashboard = sqlDashboard();
      const panels = (dashboard.panels ?? []).filter((p) => p.type !== 'row') as Array<{
        title: string;
        interval?: string;
        targets: Array<Json>;
      }>;
      const shown: string[] = [];
      for (const ctx of [context, narrowed]) {
        for (const panel of panels) shown.push(JSON.stringify(await runPanel(panel.targets[0]!, panel.interval, ctx)));
        for (const sql of Object.values(SQL_VARIABLES))
          shown.push(JSON.stringify((await grafana.query(interpolate(sql, 'sql', ctx))).rows));
      }
      expect(shown.join('\n')).not.toContain(SECRET);
      const top = await runPanel(panelTargets(dashboard).get('top_total')![0]!, undefined, narrowed);
      expect(top.map((r) => r.query)).toEqual([WITHHELD_TEXT]);
      const listed = (await grafana.query(interpolate(SQL_VARIABLES.queryid, 'sql', context))).rows.find((r) => r.__value === queryid);
      expect(listed?.__text).toContain('(not shown');
    } finally {
      await admin.query('UPDATE bpf_stats.query_texts SET query = $2 WHERE queryid = $1', [queryid, WITHHELD_TEXT]);
    }
  });
});

describe('PromQL panels, evaluated by Prometheus after real scrapes', () => {
  it('every panel returns series, with the component the workload made', async () => {
    const to = new Date();
    const context: QueryContext = {
      from: windowStart,
      to,
      maxDataPoints: 100,
      minIntervalMs: 1000,
      scrapeIntervalMs: 1000,
      variables: { instance: { values: [instance] }, datname: { ...ALL, allValue: '.*' }, queryid: { ...ALL, allValue: '.*' } },
    };
    // LWLock waits are not provoked: their panels must show them when Prometheus saw them grow.
    const rangeS = Math.round((to.getTime() - windowStart.getTime()) / 1000);
    const lwlockSeen =
      (
        await promApi('/api/v1/query', {
          query: `sum(increase(pg_bpf_query_lwlock_wait_seconds_total{instance="${instance}"}[${rangeS}s])) > 0`,
          time: to.getTime() / 1000,
        })
      ).length > 0;
    const step = Math.max(1, Math.ceil((to.getTime() - windowStart.getTime()) / 100 / 1000));
    const results = new Map<
      string,
      Array<{ metric: Record<string, string>; value?: [number, string]; values?: Array<[number, string]> }>
    >();
    for (const [key, targets] of panelTargets(prometheusDashboard())) {
      for (const target of targets) {
        const query = interpolate(target.expr as string, 'prometheus', context);
        expect(query).not.toMatch(/\$\w/);
        const series = target.instant
          ? await promApi('/api/v1/query', { query, time: to.getTime() / 1000 })
          : await promApi('/api/v1/query_range', { query, start: windowStart.getTime() / 1000, end: to.getTime() / 1000, step });
        results.set(`${key}/${target.refId}`, series);
        if (!MAY_BE_EMPTY.has(key) || (key.includes('lwlock') && lwlockSeen))
          expect(series.length, `${key} ${target.refId}: ${query}`).toBeGreaterThan(0);
        console.log(`PromQL ${key}/${target.refId}: ${series.length} series`);
      }
    }
    const peak = (key: string) => Math.max(0, ...results.get(key)!.flatMap((s) => (s.values ?? [s.value!]).map((v) => Number(v[1]))));
    // on CPU, run queue, block IO, lock: A..D of the stacked panel.
    for (const ref of ['A', 'B', 'C', 'D']) expect(peak(`time_by_component/${ref}`), ref).toBeGreaterThan(0);
    expect(peak('memory_stalls/A')).toBeGreaterThan(0);
    expect(peak('reclaim_pages/A')).toBeGreaterThan(0);
    expect(peak('block_io/A')).toBeGreaterThan(0);
    const withText = (key: string) => results.get(key)!.map((s) => s.metric.query ?? '');
    expect(withText('top_on_cpu/A')[0]).toContain('dashboard_cpu');
    expect(withText('top_lock_wait/A')[0]).toContain('dashboard_lock');
    expect(withText('top_io_wait/A').some((q) => q.includes('dashboard_cold'))).toBe(true);
    expect(withText('top_reclaim/A').some((q) => q.includes('dashboard_cold'))).toBe(true);
    expect(results.get('backend_type_time/A')!.map((s) => s.metric.backend_type)).toContain('client backend');
  });
});

describe('operators a plain role planted in public (last: they stay)', () => {
  it("run in no panel and no variable, as the dashboard's pg_monitor role with the default search_path", async () => {
    const context = panelContext((await admin.query(SQL_VARIABLES.pgss)).rows[0]!.quote_ident as string);
    const dashboard = sqlDashboard();
    const panels = (dashboard.panels ?? []).filter((p) => p.type !== 'row') as Array<{
      title: string;
      interval?: string;
      targets: Array<Json>;
    }>;
    const expand = (sql: string, interval?: string) => {
      const c = { ...context, minIntervalMs: interval ? parseDuration(interpolate(interval, 'sql', context)) : 0 };
      return expandSqlMacros(interpolate(sql, 'sql', c), c);
    };
    const statements = [
      ...panels.map((p) => ({ title: p.title, sql: expand(p.targets[0]!.rawSql as string, p.interval) })),
      ...Object.entries(SQL_VARIABLES).map(([name, sql]) => ({ title: `variable ${name}`, sql: expand(sql) })),
    ];
    // Every operator name in what Grafana would send (macros expanded), and the = of IN, NULLIF and joins.
    const names = new Set<string>(OPERATOR_NAMES);
    for (const { sql } of statements) for (const name of operatorNamesIn(sql)) names.add(name);
    const mallory = new pg.Client(cluster.connectionString().replace('postgres@', 'mallory@'));
    await mallory.connect();
    try {
      expect((await mallory.query("SELECT pg_catalog.has_schema_privilege('public', 'CREATE') AS ok")).rows[0].ok).toBe(true);
      const made = await plantOperators(mallory, 'public', names);
      console.log(`planted ${made} operators in public: ${[...names].join(' ')}`);
      expect(made).toBeGreaterThan(1000);
    } finally {
      await mallory.end();
    }
    expect((await grafana.query('SHOW search_path')).rows[0].search_path).toBe('"$user", public');
    // The trap works: what the panels sent before (float8 / integer, numeric / integer from $__timeGroup) runs the planted ones.
    await expect(grafana.query('SELECT 0.5::float8 / 1000')).rejects.toThrow(
      /planted operator public\.\/\(double precision, integer\) ran as grafana/,
    );
    await expect(grafana.query('SELECT floor(extract(epoch from now())/60)*60')).rejects.toThrow(
      /planted operator public\.\/\(numeric, integer\) ran as grafana/,
    );
    const failed: string[] = [];
    for (const { title, sql } of statements) {
      const outcome = await grafana.query(sql).then(
        (r) => `${r.rows.length} rows`,
        (error: Error) => (failed.push(`${title}: ${error.message}`), error.message),
      );
      console.log(`planted: ${title}: ${outcome}`);
    }
    expect(failed).toEqual([]);
  }, 120_000);
});
