import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { KEEP_WITHIN } from '../../src/collector/histogram-layout.js';
import { readReport } from '../../src/report/report-read.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { backendPid } from '../../src/storage/backend-pid.js';
import { runCli } from '../support/run-cli.js';

/*
 * `pg-bpf-stats report` on two periods this test produces, for what report.test.ts leaves out:
 * - latency percentiles per period, from bpf_stats.query_histogram_history: a statement that
 *   sleeps for known lengths (pg_sleep), all 10 ms in the baseline, 10, 40 and 120 ms in the
 *   window. Ground truth the collector did not compute: each statement's latency lies between
 *   its nominal sleep and what the client timed, so each reported percentile must lie within
 *   the documented 10% of that range's percentiles;
 * - a real memcg reclaim in the window: a backend in an 8 MB memory cgroup writes a 100 MB file
 *   (COPY TO), whose dirty page cache the kernel must reclaim, waiting for its writeback, to
 *   charge the next pages. The same statement runs in the baseline outside any limit, where the
 *   dirty pages stay far below the host's dirty limits. (Reclaiming clean cache was tried first:
 *   a millisecond per call, lost in this shared machine's noise. A 32 MB limit left 35-65 ms
 *   per call of reclaim, within what the on-CPU time moves between periods, up to 80 ms; 8 MB
 *   gives 70-170.) Ground truth: the cgroup's
 *   failcnt (the limit was hit) while the window's writes ran, no limit in the baseline, and the
 *   client's timing of the writes (slower in the window). The report must name reclaim for it,
 *   and no wait event for the writeback waits, which have none.
 */
const SLEEP = 'SELECT pg_sleep($1::float8) AS report_sleep';
const MB = 1024 * 1024;
const LIMIT = 8 * MB;
/** About 100 MB, a kilobyte a line. */
const WRITE_LINES = 100_000;
const WRITES = 5;
/** Sleep lengths (ms) and how many of each: every percentile falls well inside one length. */
const BASELINE_SLEEPS: Array<[number, number]> = [[10, 40]];
const WINDOW_SLEEPS: Array<[number, number]> = [
  [10, 60],
  [40, 37],
  [120, 3],
];
const QUANTILES = [0.5, 0.95, 0.99];

let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let sleeper: pg.Client;
let writer: pg.Client;
let copyStatement = '';
let copyFile = '';
const periods: { baseline: [number, number]; window: [number, number] } = { baseline: [0, 0], window: [0, 0] };
/** Each sleep statement's nominal length and the client's timing of it (ms), per period. */
const sleeps: Record<'baseline' | 'window', Array<{ nominal: number; timed: number }>> = { baseline: [], window: [] };
let windowFailcnt = 0;
let windowPeakBytes = 0;
const ids: { sleep: string; write: string } = { sleep: '', write: '' };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const iso = (ms: number) => new Date(ms).toISOString();
const range = ([fromMs, toMs]: [number, number]) => ({ fromMs, toMs });

/** A flush, then the server's own time: history rows carry the flush's transaction time. */
async function flushAndMark(): Promise<number> {
  expect((await sidecar.flush()).error).toBeNull();
  await sleep(20);
  const { rows } = await admin.query('SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms');
  await sleep(20);
  return Number(rows[0].ms);
}

async function runSleeps(plan: Array<[number, number]>, into: Array<{ nominal: number; timed: number }>): Promise<void> {
  // Interleaved, so that no length has a quieter moment of the machine to itself.
  const order = plan.flatMap(([ms, n]) => Array.from({ length: n }, () => ms));
  order.sort((a, b) => ((a * 7919) % 13) - ((b * 7919) % 13) || a - b);
  for (const ms of order) {
    const started = performance.now();
    await sleeper.query(SLEEP, [ms / 1000]);
    into.push({ nominal: ms, timed: performance.now() - started });
  }
}

/** The client's timing of each write (ms), per period. */
const writeTimes: Record<'baseline' | 'window', number[]> = { baseline: [], window: [] };

/**
 * The file writes; inside `cgroup` when given (the window). The last write's file is removed
 * first, here: COPY's own truncate of it would wait for its pages still under writeback, an IO
 * wait as long as the disk is busy with other work, in either period.
 */
async function writes(cgroup: MemoryCgroup | null): Promise<void> {
  for (let i = 0; i < WRITES; i++) {
    rmSync(copyFile, { force: true });
    const before = cgroup?.failcnt() ?? 0;
    const started = performance.now();
    await writer.query(copyStatement);
    writeTimes[cgroup ? 'window' : 'baseline'].push(performance.now() - started);
    if (cgroup) windowFailcnt += cgroup.failcnt() - before;
  }
}

/** The value of rank ceil(q × n), the one a histogram percentile estimates. */
function exactQuantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

function lineOf(stdout: string, queryid: string, after = 0): string {
  const line = stdout
    .split('\n')
    .slice(after)
    .find((l) => l.startsWith(`${queryid} `));
  expect(line, `a line for ${queryid} in:\n${stdout}`).toBeDefined();
  return line!;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ settings: { shared_buffers: "'16MB'" } });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  // Into the data directory: the server's OS user may write there.
  copyFile = join(cluster.dataDir, 'report_reclaim.out');
  copyStatement = `COPY (SELECT repeat('x', 1000) AS report_write FROM generate_series(1, ${WRITE_LINES})) TO '${copyFile.replace(/'/g, "''")}'`;
  sleeper = new pg.Client(cluster.connectionString());
  await sleeper.connect();
  writer = new pg.Client(cluster.connectionString());
  await writer.connect();
  await writer.query('SET max_parallel_workers_per_gather = 0');
  // Exact calls (query) and statement latency histograms (latency); memory is a default set.
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    probeSets: ['query', 'latency'],
    intervalMs: 3_600_000,
    historyIntervalMs: 0,
    log: () => undefined,
  });

  periods.baseline[0] = await flushAndMark();
  await runSleeps(BASELINE_SLEEPS, sleeps.baseline);
  await writes(null);
  periods.baseline[1] = await flushAndMark();

  await sleep(1000);
  periods.window[0] = Number((await admin.query('SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms')).rows[0].ms);
  await runSleeps(WINDOW_SLEEPS, sleeps.window);
  const cgroup = MemoryCgroup.create('pgbpf-report', LIMIT);
  try {
    cgroup.add(backendPid(writer));
    await writes(cgroup);
    windowPeakBytes = Number(readFileSync(join(cgroup.dir, 'memory.max_usage_in_bytes'), 'utf8'));
  } finally {
    cgroup.remove();
  }
  periods.window[1] = await flushAndMark();

  for (const [name, pattern] of [
    ['sleep', '%report_sleep%'],
    ['write', '%report_write%'],
  ] as const) {
    const { rows } = await admin.query('SELECT queryid::text FROM pg_stat_statements WHERE query LIKE $1', [pattern]);
    expect(rows, pattern).toHaveLength(1);
    ids[name] = rows[0].queryid;
  }
}, 300_000);

afterAll(async () => {
  await sidecar?.stop();
  await sleeper?.end();
  await writer?.end();
  await admin?.end();
  await cluster?.stop();
});

describe('pg-bpf-stats report over two periods', () => {
  const report = () =>
    runCli([
      'report',
      '--dsn',
      cluster.connectionString(),
      '--window',
      `${iso(periods.window[0])}..${iso(periods.window[1])}`,
      '--baseline-window',
      `${iso(periods.baseline[0])}..${iso(periods.baseline[1])}`,
    ]);

  it("shows each period's latency percentiles within 10% of the statements' own latencies", async () => {
    const { code, stdout, stderr } = await report();
    expect(code, stderr).toBe(0);
    const heading = stdout.split('\n').indexOf('Statement latency (ms, p50/p95/p99; baseline → window)');
    expect(heading, stdout).toBeGreaterThan(0);
    const line = lineOf(stdout, ids.sleep, heading);
    const match = /^\S+\s+([0-9.]+)\/([0-9.]+)\/([0-9.]+) → ([0-9.]+)\/([0-9.]+)\/([0-9.]+)$/.exec(line);
    expect(match, line).not.toBeNull();
    const shown = { baseline: match!.slice(1, 4).map(Number), window: match!.slice(4, 7).map(Number) };
    for (const period of ['baseline', 'window'] as const) {
      const nominal = sleeps[period].map((s) => s.nominal);
      const timed = sleeps[period].map((s) => s.timed);
      QUANTILES.forEach((q, i) => {
        const low = exactQuantile(nominal, q);
        const high = exactQuantile(timed, q);
        console.log(`${period} p${q * 100}: shown ${shown[period][i]} ms; slept ${low} ms, the client timed ${high.toFixed(2)} ms`);
        expect(shown[period][i], `${period} p${q * 100}`).toBeGreaterThanOrEqual(low * (1 - KEEP_WITHIN));
        expect(shown[period][i], `${period} p${q * 100}`).toBeLessThanOrEqual(high * (1 + KEEP_WITHIN));
      });
    }
  });

  it('puts the same percentiles in the HTML file', async () => {
    const text = await report();
    const heading = text.stdout.split('\n').indexOf('Statement latency (ms, p50/p95/p99; baseline → window)');
    const [baseline, window] = lineOf(text.stdout, ids.sleep, heading)
      .replace(/^\S+\s+/, '')
      .split(' → ')
      .map((p) => p.split('/'));
    const dir = mkdtempSync(join(tmpdir(), 'pgbpf-report-'));
    try {
      const file = join(dir, 'report.html');
      const { code, stderr } = await runCli([
        'report',
        '--dsn',
        cluster.connectionString(),
        '--window',
        `${iso(periods.window[0])}..${iso(periods.window[1])}`,
        '--baseline-window',
        `${iso(periods.baseline[0])}..${iso(periods.baseline[1])}`,
        '--html',
        file,
      ]);
      expect(code, stderr).toBe(0);
      const html = readFileSync(file, 'utf8');
      const block = html.slice(html.indexOf(`queryid ${ids.sleep}`));
      const cells = (p: string[] | undefined) => p!.map((v) => `<td class="num">${v}</td>`).join('');
      expect(block).toContain(`<tr><th>baseline</th><td class="num">${sleeps.baseline.length}</td>${cells(baseline)}</tr>`);
      expect(block).toContain(`<tr><th>window</th><td class="num">${sleeps.window.length}</td>${cells(window)}</tr>`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names reclaim for the statement that wrote a file in a memory cgroup smaller than it', async () => {
    // Ground truth: the limit was hit while the window's writes ran, and the cgroup was at its limit.
    expect(windowFailcnt).toBeGreaterThan(0);
    expect(windowPeakBytes).toBeGreaterThan(0.9 * LIMIT);
    // And the client saw the writes slower in the window: the report has something to explain.
    const mean = (ms: number[]) => ms.reduce((a, b) => a + b, 0) / ms.length;
    console.log(`client: ${mean(writeTimes.baseline).toFixed(1)} → ${mean(writeTimes.window).toFixed(1)} ms per write`);
    expect(mean(writeTimes.window)).toBeGreaterThan(mean(writeTimes.baseline));
    const { code, stdout, stderr } = await report();
    expect(code, stderr).toBe(0);
    const line = lineOf(stdout, ids.write);
    const breakdown = stdout.split('\n').indexOf('Where the time went (ms per call; baseline → window)');
    console.log(`${line}\n${stdout.split('\n')[breakdown + 1]}\n${lineOf(stdout, ids.write, breakdown)}`);
    const columns = line.split(/\s+/);
    expect(columns.slice(1, 3).map(Number)).toEqual([WRITES, WRITES]);
    // Named first, as the cause, within the part its time counts in: waiting for the writeback is
    // off the CPU, so that is "other waits" here; reclaim that found clean pages would be on CPU.
    expect(columns.slice(6).join(' ')).toMatch(/^reclaim \+[0-9.]+ ms\/call \(in /);
    // Its writeback waits were sleeps without a wait event (history has them under type ''):
    // no name to give, so none is given (once shown as ": +…").
    const { rows } = await admin.query(
      `SELECT pg_catalog.sum(wait_time_ms)::float8 AS ms FROM bpf_stats.query_wait_event_stats_history
        WHERE queryid = $1::bigint AND wait_event_type = '' AND ts >= $2 AND ts < $3`,
      [ids.write, new Date(periods.window[0]), new Date(periods.window[1])],
    );
    expect(rows[0].ms).toBeGreaterThan(0);
    const data = await readReport(admin, { window: range(periods.window), baseline: range(periods.baseline) }, 100);
    const events = data.statements.find((st) => st.queryid === ids.write)?.waitEvents;
    expect(events).toBeDefined();
    for (const name of [...Object.keys(events!.window), ...Object.keys(events!.baseline)]) expect(name).toMatch(/^[^:]+:[^:]+$/);
  });
});
