import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { SidecarProcess } from './sidecar-process.js';

/*
 * Soak: `pg-bpf-stats run` (the CLI, as an operator runs it) against a cluster where everything
 * hostile happens at once, for a set time:
 *   - pgbench -S -C (a new connection per transaction) in chunks, the query set attached;
 *   - the collector's role has idle_session_timeout = 500ms (its idle connections are closed);
 *   - every 2 s, pg_terminate_backend of every connection the collector has;
 *   - a role flooding distinct statements, distinct NOTIFY channels, and junk NOTIFYs on the
 *     control channel;
 *   - at a third of the time, a backend is SIGKILLed: the postmaster's crash restart (same
 *     postmaster, the collector must ride through it on its own);
 *   - at two thirds, the postmaster itself is SIGKILLed and started again: a new postmaster,
 *     which the collector follows by itself (an exit instead is counted as a crash, and the soak
 *     starts it again as a service manager would).
 * Between those events the workload pauses and the calls of pgbench's statement are checked
 * against pg_stat_statements (exact: the query set counts every statement end). All along,
 * the collector's RSS and CPU per flush, the tables' row counts and the queries map's fill are
 * sampled. Ground truth: pg_stat_statements, /proc, the exit codes.
 *
 * Run (root, built): node dist/bench/soak.js [--seconds 3600] [--collector-log FILE]
 */

const INTERVAL_S = 1;
const RETENTION_S = 60;
const PGBENCH_STATEMENT = 'SELECT abalance FROM pgbench_accounts WHERE aid = $1';
let eraLog: (line: string) => void = () => undefined;
let currentCollectorPid: () => number | undefined = () => undefined;
let currentCollectorRunning: () => boolean = () => true;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface SoakSample {
  atS: number;
  rssMb: number;
  cpuMsPerFlush: number;
  flushMs: number;
  queriesInMap: number;
  rows: Record<string, number>;
}

export interface EraCheck {
  era: string;
  pgss: number;
  collected: number;
  /** The running collector's overflow counters (health.dropped) at the era's end: where missing calls went. */
  dropped: Record<string, number>;
}

export interface SoakResult {
  seconds: number;
  samples: SoakSample[];
  eras: EraCheck[];
  /** Exits of the collector that were not the expected "postmaster restarted" exit 2. */
  crashes: string[];
  collectorStarts: number;
  /** Starts that ended in exit 2 (their connection terminated while starting) and were retried. */
  failedStarts: string[];
  terminations: number;
  flooded: number;
  pgbenchTransactions: number;
  /** Rows of exited backends older than retention + check period + a flush (must be 0). */
  expiredBackendRows: number;
  stackTraces: number;
  /** The collector's own lines, for the reader (all of them in `collectorLog`). */
  logLines: number;
  collectorLog: string;
  problems: string[];
}

/** Runs the soak for `seconds` (at least 30) and returns what it measured; problems[] lists failed checks. */
export async function runSoak(seconds: number, log: (line: string) => void = () => undefined): Promise<SoakResult> {
  eraLog = log;
  const cluster = await ThrowawayCluster.start({ settings: { max_connections: 200, 'pg_stat_statements.max': 1000 } });
  const started = Date.now();
  const at = () => (Date.now() - started) / 1000;
  const result: SoakResult = {
    seconds,
    samples: [],
    eras: [],
    crashes: [],
    failedStarts: [],
    collectorStarts: 0,
    terminations: 0,
    flooded: 0,
    pgbenchTransactions: 0,
    expiredBackendRows: 0,
    stackTraces: 0,
    logLines: 0,
    collectorLog: '',
    problems: [],
  };
  let sidecar: SidecarProcess | null = null;
  let collectorLog = '';
  let stopping = false;
  let paused = false;
  /** Resolves when the pgbench chunk running now (if any) has ended. */
  let chunk: Promise<unknown> = Promise.resolve();
  /** pgbench chunks that completed transactions: an era lasts until one more has. */
  let chunksWithWork = 0;
  const background: Array<Promise<void>> = [];
  const admin = () => connectRetrying(cluster.connectionString());
  try {
    const setup = await admin();
    await setup.query('CREATE EXTENSION pg_stat_statements');
    await setup.query(`CREATE ROLE collector LOGIN SUPERUSER`);
    await setup.query(`ALTER ROLE collector SET idle_session_timeout = '500ms'`);
    await setup.query(`CREATE ROLE flooder LOGIN`);
    await setup.end();
    await cluster.exec(
      'pgbench',
      ['-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', '-i', '-q', '-s', '2', 'postgres'],
      300_000,
    );
    const collectorDsn = cluster.connectionString().replace('postgres@', 'collector@');

    currentCollectorPid = () => (sidecar as SidecarProcess | null)?.pid;
    currentCollectorRunning = () => (sidecar as SidecarProcess | null)?.running ?? false;
    const startCollector = async () => {
      const { sidecar: s } = await SidecarProcess.start({
        dsn: collectorDsn,
        probes: 'query',
        interval: `${INTERVAL_S}s`,
        args: ['--row-retention', `${RETENTION_S}s`, '--history-retention', `${RETENTION_S}s`],
      });
      result.collectorStarts++;
      sidecar = s;
      const exited = s.whenExited().then((code) => {
        collectorLog += `${s.log()}\n`;
        const restartLine = /postmaster restarted/.test(s.log());
        if (!stopping && !(code === 2 && restartLine))
          result.crashes.push(`exit ${code ?? s.exitDescription()} at ${at().toFixed(0)} s: ${s.log().split('\n').slice(-2).join(' | ')}`);
      });
      // Wrapped: an async function returning the promise itself would wait for the exit.
      return { exited };
    };
    log('cluster ready, pgbench tables filled; starting the collector');
    let collectorExit = await startCollector();
    log(`collector ${(sidecar as SidecarProcess | null)?.pid} attached`);

    // pgbench -C in chunks, pausable between them.
    background.push(
      (async () => {
        while (!stopping) {
          if (paused) {
            await sleep(100);
            continue;
          }
          const run = runPgbench(cluster, 5);
          chunk = run;
          const transactions = await run;
          result.pgbenchTransactions += transactions;
          if (transactions > 0) chunksWithWork++;
        }
      })(),
    );
    // The collector's connections, terminated every 2 s.
    background.push(
      (async () => {
        while (!stopping) {
          await sleep(2000);
          const c = await admin().catch(() => null);
          if (!c) continue;
          const { rows } = await c
            .query(`SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE usename = 'collector'`)
            .catch(() => ({ rows: [{ n: 0 }] }));
          result.terminations += rows[0].n as number;
          await c.end().catch(() => undefined);
        }
      })(),
    );
    // The flooding role: distinct statements, distinct NOTIFY channels, junk on the control channel.
    background.push(
      (async () => {
        let n = 0;
        while (!stopping) {
          const c = await connectRetrying(cluster.connectionString().replace('postgres@', 'flooder@')).catch(() => null);
          if (!c) continue;
          try {
            while (!stopping) {
              n++;
              // 10,000 distinct shapes (constants would be normalized away), then again from the first.
              await c.query(`SELECT 1${'+1'.repeat(n % 100)}, 1${'+1'.repeat(Math.floor(n / 100) % 100)}`);
              if (n % 3 === 0) await c.query(`NOTIFY flood_${n}`);
              if (n % 50 === 0) await c.query(`NOTIFY bpf_stats_control, 'junk ${n}'`);
              result.flooded++;
            }
          } catch {
            // the crashes end this connection: open another
          } finally {
            await c.end().catch(() => undefined);
          }
        }
      })(),
    );
    // Samples every 10 s.
    let lastCpu = 0;
    let lastFlushes = 0;
    background.push(
      (async () => {
        while (!stopping) {
          await sleep(10_000);
          const s = sidecar as SidecarProcess | null;
          if (!s?.running) continue;
          const c = await admin().catch(() => null);
          if (!c) continue;
          try {
            const health = (await c.query(`SELECT flushes, flush_ms, map_fill FROM bpf_stats.health WHERE pid = $1`, [s.pid])).rows[0];
            const rows: Record<string, number> = {};
            for (const table of ['backend_stats', 'query_stats', 'collections', 'health', 'backend_stats_history', 'query_stats_history']) {
              rows[table] = Number((await c.query(`SELECT count(*) AS n FROM bpf_stats.${table}`)).rows[0].n);
            }
            const cpu = s.cpuSeconds();
            const flushes = Number(health?.flushes ?? 0);
            const sample: SoakSample = {
              atS: Math.round(at()),
              rssMb: s.rssMb(),
              cpuMsPerFlush:
                flushes > lastFlushes && cpu >= lastCpu && lastFlushes > 0 ? ((cpu - lastCpu) * 1000) / (flushes - lastFlushes) : NaN,
              flushMs: Number(health?.flush_ms ?? NaN),
              queriesInMap: Number(health?.map_fill?.queries?.entries ?? NaN),
              rows,
            };
            lastCpu = cpu;
            lastFlushes = flushes;
            result.samples.push(sample);
            log(
              `${sample.atS} s: rss ${sample.rssMb.toFixed(0)} MB, ${Number.isNaN(sample.cpuMsPerFlush) ? 'n/a' : sample.cpuMsPerFlush.toFixed(1)} ms CPU/flush, map ${sample.queriesInMap}, backend_stats ${rows.backend_stats}, query_stats ${rows.query_stats}`,
            );
          } catch {
            // the database is restarting
          } finally {
            await c.end().catch(() => undefined);
          }
        }
      })(),
    );

    // Eras: check, crash, check, postmaster restart, check.
    const pause = async () => {
      paused = true;
      await chunk;
    };
    const resume = () => (paused = false);
    // An era lasts until its share of the time is over and pgbench has completed a chunk in it: on a
    // loaded machine, starting an era (two flushes awaited) can take longer than the share itself.
    const runEraUntil = async (atMs: number) => {
      const chunksBefore = chunksWithWork;
      await sleep(atMs - (Date.now() - started));
      const deadline = Date.now() + 60_000;
      while (chunksWithWork === chunksBefore && Date.now() < deadline) await sleep(100);
    };
    let baseline = await startEra(cluster, pause, resume);
    log(`era 1 started at ${at().toFixed(0)} s (baseline ${baseline})`);
    await runEraUntil((seconds * 1000) / 3);
    result.eras.push(await endEra(cluster, 'start .. backend crash', baseline, pause));
    log('SIGKILL of a backend: crash restart of the same postmaster');
    await crashBackend(cluster);
    baseline = await startEra(cluster, pause, resume);
    await runEraUntil((seconds * 2000) / 3);
    result.eras.push(await endEra(cluster, 'backend crash .. postmaster kill', baseline, pause));
    log('SIGKILL of the postmaster, then pg_ctl start: a new postmaster');
    const running = sidecar as SidecarProcess | null;
    await killPostmaster(cluster);
    // The collector follows the new postmaster by itself (src/sidecar/postmaster-follower.ts). Should it exit instead
    // (counted as a crash), a service manager would start it again, and so does the soak; that
    // start can lose its connection to the terminations too (exit 2, one line), counted as well.
    const followed = await Promise.race([waitForLine(running, /following postmaster/, 120_000), collectorExit.exited.then(() => false)]);
    log(
      followed
        ? `the collector followed the new postmaster at ${at().toFixed(0)} s`
        : 'the collector exited at the postmaster kill: starting it again',
    );
    for (let attempt = 1; !followed; attempt++) {
      try {
        collectorExit = await startCollector();
        break;
      } catch (error) {
        result.failedStarts.push(error instanceof Error ? error.message.split('\n').slice(-1)[0]! : String(error));
        if (attempt >= 10) throw error;
      }
    }
    baseline = await startEra(cluster, pause, resume);
    await runEraUntil(seconds * 1000 - 5000);
    result.eras.push(await endEra(cluster, 'postmaster restart .. end', baseline, pause));

    // Tables bounded: nothing older than the retention (+ its check period + a few flushes) is left.
    const c = await admin();
    const cutoff = `${RETENTION_S + Math.min(RETENTION_S / 4, 300) + 5} seconds`;
    result.expiredBackendRows = Number(
      (await c.query(`SELECT count(*) AS n FROM bpf_stats.backend_stats WHERE exited_at < now() - $1::interval`, [cutoff])).rows[0].n,
    );
    await c.end();
    stopping = true;
    const last = sidecar as SidecarProcess | null;
    const code = await last?.stop();
    await collectorExit.exited;
    if (code !== 0) result.crashes.push(`final stop: exit ${code}`);
    await Promise.all(background);
  } catch (error) {
    // What the collector said last is the first thing to read when the soak itself fails.
    const last = (sidecar as SidecarProcess | null)?.log().split('\n').slice(-8).join('\n') ?? '';
    throw new Error(`${error instanceof Error ? error.message : String(error)}\ncollector's last lines:\n${last}`);
  } finally {
    stopping = true;
    (sidecar as SidecarProcess | null)?.killNow();
    await cluster.stop();
  }
  result.stackTraces = (collectorLog.match(/^\s+at .+\(.+:\d+:\d+\)$/gm) ?? []).length;
  result.logLines = collectorLog.split('\n').filter(Boolean).length;
  result.collectorLog = collectorLog;
  judge(result);
  return result;
}

/** Whether the collector logged a line matching `line` within `timeoutMs` (false when it did not, or exited). */
async function waitForLine(collector: SidecarProcess | null, line: RegExp, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (collector?.running && Date.now() < deadline) {
    if (line.test(collector.log())) return true;
    await sleep(250);
  }
  return collector !== null && line.test(collector.log());
}

/** Pauses pgbench, waits for what it did to be written, resets pg_stat_statements, resumes; returns the collected calls then. */
async function startEra(cluster: ThrowawayCluster, pause: () => Promise<void>, resume: () => void): Promise<number> {
  await withTimeout(pause(), 30_000, 'pgbench did not pause');
  const c = await connectRetrying(cluster.connectionString());
  await waitForFlushes(c, 2);
  const collected = await collectedCalls(c);
  await c.query('SELECT pg_stat_statements_reset()');
  await c.end();
  resume();
  return collected;
}

async function endEra(cluster: ThrowawayCluster, era: string, baseline: number, pause: () => Promise<void>): Promise<EraCheck> {
  await withTimeout(pause(), 30_000, 'pgbench did not pause');
  const c = await connectRetrying(cluster.connectionString());
  // pg_stat_statements first, as soon as pgbench stopped: the flood goes on, and with
  // pg_stat_statements.max = 1000 it deallocates the least used entries several times a second,
  // so pgbench's entry, idle while the collector's flushes are awaited, would be next. By the
  // ids collectedCalls() counts too, not by text alone.
  const pgss = Number(
    (
      await c.query(`SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_statements WHERE query = $1 OR queryid = ANY($2::int8[])`, [
        PGBENCH_STATEMENT,
        [...pgbenchQueryIds],
      ])
    ).rows[0].n,
  );
  await waitForFlushes(c, 2);
  const collected = (await collectedCalls(c)) - baseline;
  const health = await c.query(`SELECT dropped, pending_rows FROM bpf_stats.health WHERE pid = $1`, [currentCollectorPid()]);
  const dropped = Object.fromEntries(
    Object.entries((health.rows[0]?.dropped ?? {}) as Record<string, unknown>).map(([k, v]) => [k, Number(v)]),
  );
  await c.end();
  const overflow =
    Object.entries(dropped)
      .filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ') || 'none';
  eraLog(
    `era "${era}": pg_stat_statements ${pgss}, collected ${collected}; overflow since the collector started: ${overflow}; pending rows ${health.rows[0]?.pending_rows ?? '?'}`,
  );
  return { era, pgss, collected, dropped };
}

/**
 * Waits until the running collector has written `n` more flushes (successful ones: a flush that
 * fails is retried with the same figures), so everything before the call is in the tables, or
 * held back by the row budget after failed flushes (health.pending_rows): then for up to 10
 * more, until a written flush left nothing out. The flood goes on meanwhile, so rows may stay
 * pending; those left out longest are written first, the workload's among them.
 */
async function waitForFlushes(c: pg.Client, n: number): Promise<void> {
  // The running collector's own row: a sum over rows would drop when a predecessor's row is marked stopped.
  const pid = currentCollectorPid();
  const health = async () => {
    const row = (
      await c.query(
        `SELECT coalesce(max(flushes), 0) AS n, coalesce(max(pending_rows), 0) AS pending FROM bpf_stats.health WHERE pid = $1`,
        [pid],
      )
    ).rows[0];
    return { flushes: Number(row.n), pending: Number(row.pending) };
  };
  const start = (await health()).flushes;
  const deadline = Date.now() + 120_000;
  for (let now = await health(); now.flushes < start + n || (now.pending > 0 && now.flushes < start + n + 10); now = await health()) {
    if (!currentCollectorRunning()) throw new Error('the collector exited while the soak waited for its flushes');
    if (Date.now() > deadline) throw new Error(`the collector wrote no ${n} flushes in 120 s`);
    await sleep(250);
  }
}

/** pgbench's statement's query ids, once pg_stat_statements showed them (a crash empties it; the ids stay the same). */
const pgbenchQueryIds = new Set<string>();

async function collectedCalls(c: pg.Client): Promise<number> {
  const ids = await c.query(`SELECT queryid::text AS id FROM pg_stat_statements WHERE query = $1`, [PGBENCH_STATEMENT]);
  for (const row of ids.rows) pgbenchQueryIds.add(row.id as string);
  const { rows } = await c.query(`SELECT coalesce(sum(calls), 0) AS n FROM bpf_stats.query_stats WHERE queryid = ANY($1::int8[])`, [
    [...pgbenchQueryIds],
  ]);
  return Number(rows[0].n);
}

async function crashBackend(cluster: ThrowawayCluster): Promise<void> {
  const c = await connectRetrying(cluster.connectionString());
  const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  c.on('error', () => undefined);
  process.kill(pid, 'SIGKILL');
  await c.end().catch(() => undefined);
  await sleep(2000);
  await (await connectRetrying(cluster.connectionString())).end();
}

async function killPostmaster(cluster: ThrowawayCluster): Promise<void> {
  const c = await connectRetrying(cluster.connectionString());
  const pm = (await c.query('SELECT pid FROM pg_stat_activity WHERE pid = pg_backend_pid()')).rows[0].pid as number;
  const postmaster = Number(/PPid:\s+(\d+)/.exec(readFileSync(`/proc/${pm}/status`, 'utf8'))![1]);
  c.on('error', () => undefined);
  process.kill(postmaster, 'SIGKILL');
  await c.end().catch(() => undefined);
  for (let attempt = 0; ; attempt++) {
    await sleep(1000);
    try {
      await cluster.restart(); // pg_ctl restart starts it again once the old children are gone
      break;
    } catch (error) {
      if (attempt > 30) throw error;
    }
  }
}

/** One pgbench -S -C chunk; returns the transactions it completed (0 when the server went away). */
function runPgbench(cluster: ThrowawayCluster, seconds: number): Promise<number> {
  return new Promise((resolve) => {
    const args = [
      '-h',
      '127.0.0.1',
      '-p',
      String(cluster.port),
      '-U',
      'postgres',
      '-S',
      '-n',
      '-C',
      '-c',
      '4',
      '-j',
      '2',
      '-T',
      String(seconds),
      'postgres',
    ];
    const [file, argv] =
      process.getuid?.() === 0
        ? ['runuser', ['-u', 'postgres', '--', `${cluster.pgBin}/pgbench`, ...args]]
        : [`${cluster.pgBin}/pgbench`, args];
    const child: ChildProcess = spawn(file, argv, { stdio: ['ignore', 'pipe', 'ignore'], env: cluster.clientEnv() });
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    child.on('exit', () => resolve(Number(/number of transactions actually processed: (\d+)/.exec(out)?.[1] ?? 0)));
  });
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} in ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
}

async function connectRetrying(dsn: string): Promise<pg.Client> {
  for (let attempt = 0; ; attempt++) {
    const c = new pg.Client(dsn);
    c.on('error', () => undefined);
    try {
      await c.connect();
      return c;
    } catch (error) {
      if (attempt > 60) throw error;
      await sleep(500);
    }
  }
}

/** The checks of the soak; failed ones go to problems[]. */
function judge(r: SoakResult): void {
  for (const e of r.eras)
    if (e.pgss !== e.collected) r.problems.push(`calls in era "${e.era}": pg_stat_statements ${e.pgss}, collected ${e.collected}`);
  for (const e of r.eras) if (e.pgss === 0) r.problems.push(`era "${e.era}": no pgbench calls at all`);
  if (r.crashes.length) r.problems.push(`collector crashes: ${r.crashes.join('; ')}`);
  if (r.stackTraces) r.problems.push(`${r.stackTraces} stack trace lines in the collector's log`);
  if (r.expiredBackendRows) r.problems.push(`${r.expiredBackendRows} backend_stats rows older than the retention`);
  const third = Math.max(1, Math.floor(r.samples.length / 3));
  const first = r.samples.slice(0, third);
  const last = r.samples.slice(-third);
  const avg = (xs: number[]) => xs.filter(Number.isFinite).reduce((a, b) => a + b, 0) / Math.max(1, xs.filter(Number.isFinite).length);
  const rssGrowth = avg(last.map((s) => s.rssMb)) / avg(first.map((s) => s.rssMb));
  // A trend needs samples: taken 10 s apart, a third of a 60 s run is two of them, and the
  // postmaster restart in the last third alone can double CPU per flush. So from 3 minutes on.
  const trend = r.samples.length >= 18;
  if (trend && rssGrowth > 1.5) r.problems.push(`RSS grew ${rssGrowth.toFixed(2)}x from the first third to the last`);
  const cpuGrowth = avg(last.map((s) => s.cpuMsPerFlush)) / avg(first.map((s) => s.cpuMsPerFlush));
  if (trend && cpuGrowth > 2) r.problems.push(`CPU per flush grew ${cpuGrowth.toFixed(2)}x from the first third to the last`);
}

export function soakTable(r: SoakResult): string[] {
  const lines = [
    `soak: ${r.seconds} s, ${r.collectorStarts} collector starts, ${r.terminations} of its connections terminated, ${r.pgbenchTransactions} pgbench -C transactions, ${r.flooded} flood statements`,
  ];
  lines.push('', 'era                                  pg_stat_statements  collected');
  for (const e of r.eras) {
    const overflow = Object.entries(e.dropped)
      .filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ');
    lines.push(
      `${e.era.padEnd(36)} ${String(e.pgss).padStart(18)} ${String(e.collected).padStart(10)}${overflow ? `  (overflow so far: ${overflow})` : ''}`,
    );
  }
  lines.push('', '   t (s)  RSS MB  CPU ms/flush  flush ms  map keys  backend_stats  query_stats  history rows  health  collections');
  for (const s of r.samples) {
    lines.push(
      [
        String(s.atS).padStart(8),
        s.rssMb.toFixed(0).padStart(7),
        (Number.isFinite(s.cpuMsPerFlush) ? s.cpuMsPerFlush.toFixed(1) : '-').padStart(13),
        (Number.isFinite(s.flushMs) ? s.flushMs.toFixed(1) : '-').padStart(9),
        String(s.queriesInMap).padStart(9),
        String(s.rows.backend_stats).padStart(14),
        String(s.rows.query_stats).padStart(12),
        String((s.rows.backend_stats_history ?? 0) + (s.rows.query_stats_history ?? 0)).padStart(13),
        String(s.rows.health).padStart(7),
        String(s.rows.collections).padStart(12),
      ].join(' '),
    );
  }
  lines.push(
    '',
    `failed starts (exit 2, retried): ${r.failedStarts.length}${r.failedStarts.length ? ` (${[...new Set(r.failedStarts)].join('; ')})` : ''}`,
  );
  lines.push(
    `crashes: ${r.crashes.length}; stack trace lines: ${r.stackTraces}; backend_stats rows past retention: ${r.expiredBackendRows}; collector log lines: ${r.logLines}`,
  );
  const trend = r.samples.length >= 18 ? 'RSS and CPU per flush flat' : 'RSS and CPU per flush not judged (too short for a trend)';
  lines.push(r.problems.length ? `FAILED: ${r.problems.join('; ')}` : `ok: calls exact in every era, ${trend}, tables bounded, no crash`);
  return lines;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const i = process.argv.indexOf('--seconds');
  const seconds = i >= 0 ? Number(process.argv[i + 1]) : 900;
  if (!Number.isFinite(seconds) || seconds < 30) {
    console.error('soak: --seconds must be at least 30');
    process.exit(2);
  }
  // Interrupted: the collector at once, then the cluster, so that no postmaster or data directory is left behind.
  const onSignal = () => {
    for (const s of SidecarProcess.live) s.killNow();
    void Promise.all([...ThrowawayCluster.live].map((c) => c.stop())).finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  runSoak(seconds, (line) => console.log(line)).then(
    (r) => {
      for (const line of soakTable(r)) console.log(line);
      const logAt = process.argv.indexOf('--collector-log');
      if (logAt >= 0 && process.argv[logAt + 1]) writeFileSync(process.argv[logAt + 1]!, r.collectorLog);
      process.exit(r.problems.length ? 1 : 0);
    },
    (error: unknown) => {
      console.error(`soak: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(2);
    },
  );
}
