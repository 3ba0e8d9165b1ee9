import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { runCli } from '../support/run-cli.js';

/*
 * `pg-bpf-stats report` against history this test writes: a real cluster, the collector with a
 * history row per flush, a baseline period and a window in which one statement waits for a
 * row lock another session holds and another shares its CPU with busy loops pinned to the same
 * CPU. Ground truth the collector did not compute: pg_stat_statements' calls per period, the
 * waits the client timed while pg_locks showed the waiter blocked, and the kernel's own
 * run-queue delay of the backend (/proc/PID/schedstat).
 */
const LOCKED = 'UPDATE report_accounts SET v = v + 1 WHERE id = 1';
const CPU_BOUND = 'SELECT count(*) FROM generate_series(1, 300000)';
/** How pg_stat_statements shows them: constants become $n. */
const SHOWN: Record<string, string> = {
  [LOCKED]: 'UPDATE report_accounts SET v = v + $1 WHERE id = $2',
  [CPU_BOUND]: 'SELECT count(*) FROM generate_series($1, $2)',
};
const CALLS = 4;
const HOLD_MS = 250;
const OUTPUT = resolve('build/test-output/report');

let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let worker: pg.Client;
let workerPid = 0;
const periods: { baseline: [number, number]; window: [number, number] } = { baseline: [0, 0], window: [0, 0] };
/** pg_stat_statements' calls of each statement in each period. */
const truthCalls = { baseline: new Map<string, number>(), window: new Map<string, number>() };
/** What the client timed each blocked UPDATE waiting, in the window. */
const lockWaits: number[] = [];
/** The backend's run-queue delay (schedstat, ms) while it ran the CPU-bound statement, per period. */
const runDelayMs = { baseline: 0, window: 0 };
const ids: Record<string, string> = {};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const iso = (ms: number) => new Date(ms).toISOString();

/** The kernel's run_delay of a task in ms: the second field of /proc/PID/schedstat (ns). */
function runDelay(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
}

async function pgssCalls(): Promise<Map<string, number>> {
  const { rows } = await admin.query('SELECT query, calls FROM pg_stat_statements WHERE query IN ($1, $2)', [
    SHOWN[LOCKED],
    SHOWN[CPU_BOUND],
  ]);
  const calls = new Map<string, number>(rows.map((r) => [r.query, Number(r.calls)]));
  return new Map([LOCKED, CPU_BOUND].map((q) => [q, calls.get(SHOWN[q]!) ?? 0]));
}

/** A flush, then the server's own time: history rows carry the flush's transaction time. */
async function flushAndMark(): Promise<number> {
  await sidecar.flush();
  await sleep(20);
  const { rows } = await admin.query('SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms');
  await sleep(20);
  return Number(rows[0].ms);
}

async function runCpuBound(): Promise<number> {
  const before = runDelay(workerPid);
  for (let i = 0; i < CALLS; i++) await worker.query(CPU_BOUND);
  return runDelay(workerPid) - before;
}

/** Runs LOCKED while another session holds the row for HOLD_MS, once pg_locks shows the wait. */
async function lockedOnce(): Promise<number> {
  const holder = new pg.Client(cluster.connectionString());
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT * FROM report_accounts WHERE id = 1 FOR UPDATE');
    const started = performance.now();
    const done = worker.query(LOCKED).then(() => performance.now() - started);
    for (let i = 0; ; i++) {
      const { rows } = await admin.query("SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted AND locktype = 'transactionid'", [
        workerPid,
      ]);
      if (rows.length) break;
      if (i > 500) throw new Error('the UPDATE never waited for the row lock');
      await sleep(5);
    }
    await sleep(HOLD_MS);
    await holder.query('COMMIT');
    return await done;
  } finally {
    await holder.end();
  }
}

/**
 * Busy loops pinned to CPU 0, beside the worker's backend pinned there too. The kernel groups
 * tasks by session (sched_autogroup_enabled) and shares a CPU between the groups, not the
 * tasks: loops started from the test's session would get one group's share however many there
 * are. So the loops get a session of their own (detached: setsid) with the weight of nice -5,
 * about three times the postmaster's session's.
 */
function contend(loops: number): ChildProcess {
  expect(spawnSync('taskset', ['-p', '-c', '0', String(workerPid)]).status, 'pin the backend to CPU 0').toBe(0);
  const script = `echo -5 > /proc/$$/autogroup; for i in $(seq ${loops}); do taskset -c 0 sh -c 'while :; do :; done' & done; wait`;
  return spawn('sh', ['-c', script], { stdio: 'ignore', detached: true });
}

function uncontend(burners: ChildProcess): void {
  process.kill(-burners.pid!, 'SIGKILL');
  spawnSync('taskset', ['-p', '-c', '0-1023', String(workerPid)]);
}

/** The report's line for a query id (the terminal table starts each line with it). */
function lineOf(stdout: string, queryid: string): string {
  const line = stdout.split('\n').find((l) => l.startsWith(`${queryid} `));
  expect(line, `a line for ${queryid} in:\n${stdout}`).toBeDefined();
  return line!;
}

function grewMs(line: string, component: string): number {
  const match = new RegExp(`${component} \\+([0-9.]+) ms/call`).exec(line);
  expect(match, `"${component} +N ms/call" in: ${line}`).not.toBeNull();
  return Number(match![1]);
}

const windowArgs = () => [
  '--window',
  `${iso(periods.window[0])}..${iso(periods.window[1])}`,
  '--baseline-window',
  `${iso(periods.baseline[0])}..${iso(periods.baseline[1])}`,
];

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await admin.query('CREATE TABLE report_accounts (id int PRIMARY KEY, v int NOT NULL)');
  await admin.query('INSERT INTO report_accounts SELECT g, 0 FROM generate_series(1, 10) g');
  worker = new pg.Client(cluster.connectionString());
  await worker.connect();
  await worker.query('SET max_parallel_workers_per_gather = 0');
  workerPid = (await worker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  // Exact calls (the query set); a history row per flush, flushed by the test only.
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    probeSets: ['query'],
    intervalMs: 3_600_000,
    historyIntervalMs: 0,
    log: () => undefined,
  });

  // Baseline: both statements, nothing in their way.
  periods.baseline[0] = await flushAndMark();
  let calls = await pgssCalls();
  for (let i = 0; i < CALLS; i++) await worker.query(LOCKED);
  runDelayMs.baseline = await runCpuBound();
  periods.baseline[1] = await flushAndMark();
  let after = await pgssCalls();
  for (const q of [LOCKED, CPU_BOUND]) truthCalls.baseline.set(q, (after.get(q) ?? 0) - (calls.get(q) ?? 0));

  // Window: the UPDATE waits for a row lock each time; the count shares CPU 0 with busy loops (this shared machine's own load already puts a run-queue wait in the baseline).
  // A quiet gap, so that a --baseline span of whole seconds can take the baseline's flush and not the window's.
  await sleep(2000);
  periods.window[0] = Number((await admin.query('SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms')).rows[0].ms);
  calls = after;
  for (let i = 0; i < CALLS; i++) lockWaits.push(await lockedOnce());
  const burners = contend(2);
  try {
    await sleep(200);
    runDelayMs.window = await runCpuBound();
  } finally {
    uncontend(burners);
  }
  periods.window[1] = await flushAndMark();
  after = await pgssCalls();
  for (const q of [LOCKED, CPU_BOUND]) truthCalls.window.set(q, (after.get(q) ?? 0) - (calls.get(q) ?? 0));
  for (const q of [LOCKED, CPU_BOUND]) {
    const { rows } = await admin.query('SELECT queryid::text FROM pg_stat_statements WHERE query = $1', [SHOWN[q]]);
    expect(rows, SHOWN[q]).toHaveLength(1);
    ids[q] = rows[0].queryid;
  }
  mkdirSync(OUTPUT, { recursive: true });
}, 120_000);

afterAll(async () => {
  await sidecar?.stop();
  await worker?.end();
  await admin?.end();
  await cluster?.stop();
});

describe('pg-bpf-stats report', () => {
  it('names the lock for the statement that waited for a row lock, and the run queue for the one that shared its CPU', async () => {
    expect(truthCalls.baseline.get(LOCKED)).toBe(CALLS);
    expect(truthCalls.window.get(CPU_BOUND)).toBe(CALLS);
    const { code, stdout, stderr } = await runCli(['report', '--dsn', cluster.connectionString(), ...windowArgs()]);
    console.log(stdout);
    expect(stderr).toBe('');
    expect(code).toBe(0);

    const locked = lineOf(stdout, ids[LOCKED]!);
    // Calls per period as pg_stat_statements counted them: the CALLS and BASE columns.
    expect(locked.split(/\s+/).slice(1, 3).map(Number)).toEqual([truthCalls.window.get(LOCKED), truthCalls.baseline.get(LOCKED)]);
    // The text beside the id.
    expect(locked).toContain('UPDATE report_accounts SET v = v +');
    // The wait event behind the lock part, named as pg_stat_activity names it.
    const lockMs = grewMs(locked, 'Lock:transactionid');
    const meanWait = lockWaits.reduce((a, b) => a + b, 0) / lockWaits.length;
    // The client's timing includes the round trip and the UPDATE itself; the lock wait is nearly all of it.
    expect(lockMs).toBeGreaterThan(0.8 * HOLD_MS);
    expect(lockMs).toBeLessThanOrEqual(meanWait + 1);
    expect(lockMs).toBeGreaterThan(0.8 * meanWait);

    const cpu = lineOf(stdout, ids[CPU_BOUND]!);
    expect(cpu.split(/\s+/).slice(1, 3).map(Number)).toEqual([truthCalls.window.get(CPU_BOUND), truthCalls.baseline.get(CPU_BOUND)]);
    expect(cpu).toContain('SELECT count(*) FROM generate_series');
    const runqMs = grewMs(cpu, 'run queue');
    // The kernel's own run-queue delay of the backend per call, window against baseline.
    const truth = (runDelayMs.window - runDelayMs.baseline) / CALLS;
    console.log(
      `lock: report +${lockMs} ms/call, client-timed waits ${lockWaits.map((w) => w.toFixed(0)).join(', ')} ms; run queue: report +${runqMs} ms/call, schedstat +${truth.toFixed(1)} ms/call`,
    );
    expect(truth).toBeGreaterThan(10);
    expect(runqMs).toBeGreaterThan(0.7 * truth);
    expect(runqMs).toBeLessThan(1.3 * truth + 2);
  });

  it('reads --since/--until with a --baseline span (the same window shifted back) and names the same parts', async () => {
    // Shifted back by more than the window's length: it covers the shorter baseline period and ends before the window starts.
    const shiftSeconds = Math.ceil((periods.window[1] - periods.window[0]) / 1000) + 1;
    const { code, stdout, stderr } = await runCli([
      'report',
      '--dsn',
      cluster.connectionString(),
      '--since',
      iso(periods.window[0]),
      '--until',
      iso(periods.window[1]),
      '--baseline',
      `${shiftSeconds} seconds`,
    ]);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).toContain(
      `baseline ${iso(Math.floor(periods.window[0] / 1000) * 1000 - shiftSeconds * 1000).replace(/\.\d{3}Z$/, 'Z')}`,
    );
    grewMs(lineOf(stdout, ids[LOCKED]!), 'Lock:transactionid');
    grewMs(lineOf(stdout, ids[CPU_BOUND]!), 'run queue');
    // Without a baseline: the window's calls and time per call alone.
    const alone = await runCli([
      'report',
      '--dsn',
      cluster.connectionString(),
      '--since',
      iso(periods.window[0]),
      '--until',
      iso(periods.window[1]),
    ]);
    expect(alone.code, alone.stderr).toBe(0);
    expect(lineOf(alone.stdout, ids[LOCKED]!).split(/\s+/)[1]).toBe(String(truthCalls.window.get(LOCKED)));
  });

  it('writes one self-contained HTML file that headless Chromium renders with its charts', async () => {
    const html = join(OUTPUT, 'report.html');
    const { code, stdout, stderr } = await runCli(['report', '--dsn', cluster.connectionString(), ...windowArgs(), '--html', html]);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).toContain(html);
    const source = readFileSync(html, 'utf8');
    // Nothing to fetch when it is opened: no script, no link, no URL but the SVG namespace.
    expect(source).not.toMatch(/<script|<link|<img|@import|url\(/i);
    expect(source.match(/(?:https?:)?\/\/[^\s"'<]+/g)?.filter((u) => u !== 'http://www.w3.org/2000/svg') ?? []).toEqual([]);

    const profile = mkdtempSync(join(tmpdir(), 'report-chromium-'));
    const chromium = (extra: string[]) =>
      spawnSync(
        'chromium',
        [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
          `--user-data-dir=${profile}`,
          ...extra,
          `file://${html}`,
        ],
        { encoding: 'utf8', timeout: 90_000, maxBuffer: 64 << 20 },
      );
    try {
      const dom = chromium(['--dump-dom']);
      expect(dom.status, dom.stderr).toBe(0);
      const rendered = dom.stdout;
      // Two timelines (baseline, window) and a chart per statement, with units on the axes.
      expect((rendered.match(/<svg[^>]*class="chart timeline-chart"/g) ?? []).length).toBe(2);
      const statementCharts = (rendered.match(/<svg[^>]*class="chart statement-chart"/g) ?? []).length;
      expect(statementCharts).toBeGreaterThanOrEqual(2);
      const perCall = (rendered.match(/>ms per call</g) ?? []).length;
      expect(perCall).toBeGreaterThanOrEqual(2);
      expect(perCall + (rendered.match(/>ms per second</g) ?? []).length).toBe(statementCharts);
      expect(rendered).toContain('ms of statement time per s');
      // The statements with their ids and text, and the bars drawn.
      for (const q of [LOCKED, CPU_BOUND]) {
        expect(rendered).toContain(`queryid ${ids[q]}`);
        expect(rendered).toContain(SHOWN[q]!);
      }
      expect((rendered.match(/<rect /g) ?? []).length).toBeGreaterThan(4);
      expect(rendered).toMatch(/lock \+[0-9.]+ ms\/call/);
      expect(rendered).toMatch(/run queue \+[0-9.]+ ms\/call/);

      const screenshot = join(OUTPUT, 'report.png');
      rmSync(screenshot, { force: true });
      const shot = chromium([`--screenshot=${screenshot}`, '--window-size=1280,1400', '--hide-scrollbars']);
      expect(shot.status, shot.stderr).toBe(0);
      expect(statSync(screenshot).size).toBeGreaterThan(20_000);
      console.log(`report screenshot: ${screenshot}`);
    } finally {
      rmSync(profile, { recursive: true, force: true });
    }
  }, 180_000);

  it('says what is wrong in one line and exits 2: a bad time, an empty window, no history, no database', async () => {
    const dsn = cluster.connectionString();
    await admin.query('CREATE DATABASE report_empty');
    const elsewhere = cluster.connectionString('report_empty');
    // Nothing listens on port 1.
    const gone = 'postgresql://postgres@127.0.0.1:1/postgres';
    const cases: Array<[string[], RegExp]> = [
      [['--since', 'blorp o clock'], /--since 'blorp o clock': not a time/],
      [['--since', 'yesterday 10:00', '--baseline', 'a fortnight'], /--baseline 'a fortnight': expected a positive span/],
      [['--window', '2020-01-01 00:00..2020-01-02 00:00'], /no history in the window 2020-01-0/],
      [['--window', `${iso(periods.window[0])}..${iso(periods.window[1])}`, '--baseline', '1 week'], /no history in the baseline/],
      [['--window', '2020-01-02..2020-01-01'], /is not before the end/],
    ];
    for (const [args, message] of cases) {
      const { code, stdout, stderr } = await runCli(['report', '--dsn', dsn, ...args]);
      expect(stderr.trim().split('\n'), stderr).toHaveLength(1);
      expect(stderr).toMatch(message);
      expect(stdout).toBe('');
      expect(code).toBe(2);
    }
    const noHistory = await runCli(['report', '--dsn', elsewhere]);
    expect(noHistory.stderr).toMatch(/^.*no bpf_stats history here/);
    expect(noHistory.code).toBe(2);
    const noDatabase = await runCli(['report', '--dsn', gone]);
    expect(noDatabase.stderr.trim().split('\n')).toHaveLength(1);
    expect(noDatabase.stderr).toMatch(/cannot connect/);
    expect(noDatabase.code).toBe(2);
  });
});
