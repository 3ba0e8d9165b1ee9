import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { probeCapabilities } from '../../src/capabilities/probe-capabilities.js';
import { KERNEL_LAYOUT, quantileUs } from '../../src/collector/histogram-layout.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { loadNative } from '../../src/native/bpf-native.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { withSession } from '../support/session.js';

/*
 * Statement latency and run-queue histograms, the LLC plumbing and the query_time partition,
 * against a real cluster and real BPF. Ground truth the collector did not compute: known
 * sleeps, pg_stat_statements, the kernel's own /proc/<pid>/schedstat and /proc/<pid>/stat.
 *
 * This machine has no hardware PMU, so the llc set runs here with its two programs attached to
 * SOFTWARE page-fault events instead (PAGE_FAULTS as "references", PAGE_FAULTS_MIN as
 * "misses"): that proves the perf_event program, its per-CPU attachment and the attribution
 * to backend and query, NOT the hardware cache events themselves.
 */
const PERF_TYPE_SOFTWARE = 1;
const PERF_COUNT_SW_PAGE_FAULTS = 2;
const PERF_COUNT_SW_PAGE_FAULTS_MIN = 5;

let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;

function session<T>(fn: (client: pg.Client, pid: number) => Promise<T>): Promise<T> {
  return withSession(cluster.connectionString(), fn);
}

/** The one pg_stat_statements entry matching `pattern`, joined with `view`. */
async function rowFor(view: string, pattern: string) {
  await sidecar.flush();
  const { rows } = await admin.query(
    `SELECT s.calls AS pgss_calls, s.total_exec_time, s.max_exec_time, s.mean_exec_time, v.*
       FROM pg_stat_statements s JOIN ${view} v USING (userid, dbid, toplevel, queryid)
      WHERE s.query LIKE $1`,
    [pattern],
  );
  expect(rows, `exactly one statement matches ${pattern} in ${view}`).toHaveLength(1);
  return rows[0];
}

/** /proc/<pid>/schedstat: on-CPU ns, run-queue wait ns, slices run. */
function schedstat(pid: number): { runDelayNs: number; slices: number } {
  const [, runDelay, slices] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
  return { runDelayNs: runDelay!, slices: slices! };
}

/** minflt and majflt of a process (/proc/<pid>/stat fields 10 and 12). */
function faults(pid: number): { minflt: number; majflt: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { minflt: Number(fields[7]), majflt: Number(fields[9]) };
}

/**
 * Connects over the cluster's trusted socket with the bare protocol, then sends simple Query
 * messages and the Terminate in one write, as a client that pipelines them does; resolves with
 * the backend's pid once the backend closed the connection.
 */
function queryThenTerminate(sql: string | string[]): Promise<number> {
  const message = (type: string, body: Buffer) => {
    const head = Buffer.alloc(5);
    head.write(type, 0, 'latin1');
    head.writeInt32BE(body.length + 4, 1);
    return Buffer.concat([head, body]);
  };
  const params = Buffer.from('user\0postgres\0database\0postgres\0\0', 'latin1');
  const startup = Buffer.alloc(8);
  startup.writeInt32BE(params.length + 8, 0);
  startup.writeInt32BE(196608, 4); // protocol 3.0
  return new Promise((resolve, reject) => {
    const socket = createConnection(join(cluster.baseDir, `.s.PGSQL.${cluster.port}`));
    let pending = Buffer.alloc(0);
    let pid = 0;
    let sent = false;
    socket.on('error', reject);
    socket.on('close', () => (pid ? resolve(pid) : reject(new Error('closed before BackendKeyData'))));
    socket.on('connect', () => socket.write(Buffer.concat([startup, params])));
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5 && pending.length >= 1 + pending.readInt32BE(1)) {
        const type = String.fromCharCode(pending[0]!);
        if (type === 'K') pid = pending.readInt32BE(5);
        if (type === 'E') reject(new Error(`error from the backend: ${pending.toString('latin1', 5)}`));
        if (type === 'Z' && !sent) {
          sent = true;
          socket.write(
            Buffer.concat([...[sql].flat().map((q) => message('Q', Buffer.from(`${q}\0`, 'utf8'))), message('X', Buffer.alloc(0))]),
          );
        }
        pending = pending.subarray(1 + pending.readInt32BE(1));
      }
    });
  });
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE TABLE accounts (id int PRIMARY KEY, balance bigint)');
  await admin.query('INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 1000) g');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    probeSets: ['latency', 'sched', 'llc'],
    perfEvents: {
      on_llc_reference: { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_PAGE_FAULTS, samplePeriod: 1, label: 'page-faults' },
      on_llc_miss: { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_PAGE_FAULTS_MIN, samplePeriod: 1, label: 'minor-faults' },
    },
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('statement latency (latency set)', () => {
  it('puts 40 × pg_sleep(0.05) and 3 × pg_sleep(0.4) of one statement where the sleeps were', async () => {
    expect(sidecar.attached()).toContain('latency');
    await session(async (c) => {
      for (let i = 0; i < 40; i++) await c.query('SELECT pg_sleep(0.05)');
      for (let i = 0; i < 3; i++) await c.query('SELECT pg_sleep(0.4)');
    });
    const row = await rowFor('bpf_stats.query_latency', 'SELECT pg_sleep($1)');
    expect(Number(row.pgss_calls)).toBe(43);
    // One observation per statement: the last one's too, at the backend's exit if not before.
    expect(Number(row.observations)).toBe(43);
    // p50 is one of the 50 ms sleeps, p99 (rank 43 of 43) the longest 400 ms one: each read from
    // a log-linear bucket within 1/8 of it (pg_stat_statements' mean of the 40 short ones is the truth).
    expect(row.p50_ms).toBeGreaterThanOrEqual(50 * (1 - 1 / 8));
    expect(row.p50_ms).toBeLessThan(50 * (1 + 1 / 8));
    expect(row.p99_ms).toBeGreaterThanOrEqual(400 * (1 - 1 / 8));
    expect(row.p99_ms).toBeLessThanOrEqual(row.max_ms);
    // max is exact: the longest statement, as pg_stat_statements saw it plus parse/plan/protocol.
    expect(row.max_ms).toBeGreaterThanOrEqual(row.max_exec_time);
    expect(row.max_ms).toBeLessThan(row.max_exec_time + 15);
    expect(row.max_ms).toBeGreaterThanOrEqual(400);
  });

  it('counts a statement once even when the backend sleeps on ClientRead several times while idle', async () => {
    await session(async (c) => {
      await c.query('SELECT 42 AS answer');
      // Idle for a while with other backends' activity around: more switches, no new statement.
      await new Promise((resolve) => setTimeout(resolve, 300));
      await c.query('SELECT 43 AS answer');
    });
    const row = await rowFor('bpf_stats.query_latency', 'SELECT $1 AS answer');
    expect(Number(row.pgss_calls)).toBe(2);
    expect(Number(row.observations)).toBe(2);
    expect(row.max_ms).toBeLessThan(50);
  });

  it('measures statements inside a transaction block (idle in transaction) too', async () => {
    await session(async (c) => {
      await c.query('BEGIN');
      await c.query('SELECT pg_sleep(0.12), 1 AS in_block');
      await c.query('SELECT pg_sleep(0.12), 1 AS in_block');
      await c.query('COMMIT');
    });
    const row = await rowFor('bpf_stats.query_latency', 'SELECT pg_sleep($1), $2 AS in_block');
    expect(Number(row.observations)).toBe(2);
    // Both took 120 ms and a little more: p50 (the shorter) within 1/8 of it, never above the max.
    expect(row.p50_ms).toBeGreaterThanOrEqual(120 * (1 - 1 / 8));
    expect(row.p50_ms).toBeLessThanOrEqual(row.max_ms);
    expect(row.max_ms).toBeGreaterThanOrEqual(120);
    expect(row.max_ms).toBeGreaterThanOrEqual(row.max_exec_time);
    expect(row.max_ms).toBeLessThan(row.max_exec_time + 15);
  });

  it('counts a COPY FROM STDIN once, at its end, though it waited for client data while active', async () => {
    await admin.query('CREATE TABLE copy_target (id int)');
    // psql sends rows as it reads them: the backend sleeps on ClientRead inside the COPY
    // (state active) until the rest arrives 300 ms later.
    const psql = spawn(
      'psql',
      ['-X', '-q', '-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', '-c', 'COPY copy_target FROM STDIN', 'postgres'],
      {
        stdio: ['pipe', 'ignore', 'inherit'],
        env: cluster.clientEnv(),
      },
    );
    const exited = new Promise((resolve) => psql.on('exit', resolve));
    psql.stdin!.write('1\n2\n');
    // From the moment the COPY is running (psql needs a while to connect on a busy machine).
    await expect
      .poll(
        async () =>
          (await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'COPY copy_target%' AND state = 'active'"))
            .rows[0].n,
        { timeout: 10_000, interval: 20 },
      )
      .toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 300));
    psql.stdin!.end('3\n\\.\n');
    expect(await exited).toBe(0);
    const row = await rowFor('bpf_stats.query_latency', 'COPY copy_target FROM STDIN');
    expect(Number(row.pgss_calls)).toBe(1);
    expect(Number(row.observations)).toBe(1);
    expect(row.max_ms).toBeGreaterThanOrEqual(300);
    expect(row.max_ms).toBeLessThan(row.max_exec_time + 15);
  });

  it("counts a session's last statement when the client's Terminate is already there (no idle wait before the exit)", async () => {
    // The Query and the Terminate go out together: the backend finds the Terminate as soon as
    // the statement ends, so it exits without ever waiting for its client while idle.
    const sessions = 12;
    for (let i = 0; i < sessions; i++) {
      const pid = await queryThenTerminate('SELECT pg_sleep(0.02) FROM (VALUES (1)) AS terminate_at_once (x)');
      // Until the process is gone (reaped), not only out of pg_stat_activity.
      await expect.poll(() => existsSync(`/proc/${pid}`), { timeout: 10_000, interval: 20 }).toBe(false);
    }
    const row = await rowFor('bpf_stats.query_latency', 'SELECT pg_sleep($1) FROM (VALUES ($2)) AS terminate_at_once (x)');
    expect(Number(row.pgss_calls)).toBe(sessions);
    expect(Number(row.observations)).toBe(sessions);
    expect(row.p50_ms).toBeGreaterThanOrEqual(20 * (1 - 1 / 8));
    expect(row.max_ms).toBeLessThan(row.max_exec_time + 15);
  });

  it("sees pipelined statements only where the backend waited idle: each session's last one, never more than the calls", async () => {
    // Ten Query messages in one write: each statement after the first is already there when the
    // one before it ends, so the backend never leaves the CPU idle in between (docs/schema.md).
    const sessions = 5;
    for (let i = 0; i < sessions; i++) {
      const pid = await queryThenTerminate(
        Array.from({ length: 10 }, () => 'SELECT pg_sleep(0.01) FROM (VALUES (1), (2)) AS pipelined (x)'),
      );
      await expect.poll(() => existsSync(`/proc/${pid}`), { timeout: 10_000, interval: 20 }).toBe(false);
    }
    const row = await rowFor('bpf_stats.query_latency', 'SELECT pg_sleep($1) FROM (VALUES ($2), ($3)) AS pipelined (x)');
    expect(Number(row.pgss_calls)).toBe(sessions * 10);
    expect(Number(row.observations)).toBeGreaterThanOrEqual(sessions);
    expect(Number(row.observations)).toBeLessThanOrEqual(sessions * 10);
  });
});

describe('run-queue latency histogram (sched set)', () => {
  it("has the waits a CPU hog pinned to the backend's CPU causes, matching /proc/<pid>/schedstat", async () => {
    await session(async (c, pid) => {
      const pin = spawn('taskset', ['-p', '-c', '0', String(pid)], { stdio: 'ignore' });
      await new Promise((resolve) => pin.on('exit', resolve));
      const hog: ChildProcess = spawn('taskset', ['-c', '0', 'sh', '-c', 'while :; do :; done'], { stdio: 'ignore' });
      try {
        await new Promise((resolve) => setTimeout(resolve, 100));
        const before = schedstat(pid);
        // Long enough that the hog's share is well past the premise below on a fast CPU too (3M rows
        // left 91 ms of run-queue wait once on an AMD host).
        await c.query('SELECT count(*) FROM generate_series(1, 6000000) g WHERE g % 7 = 3');
        const after = schedstat(pid);
        await sidecar.flush();
        const { rows } = await admin.query(
          `SELECT r.waits, r.counts, r.p50_ms, r.max_ms, q.runq_wait_ms, q.nvcsw + q.nivcsw AS switches
             FROM pg_stat_statements s
             JOIN bpf_stats.query_runq_latency r USING (userid, dbid, toplevel, queryid)
             JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query LIKE '%generate_series($1, $2) g WHERE g % $3 = $4'`,
        );
        expect(rows).toHaveLength(1);
        const row = rows[0];
        const counts = (row.counts as string[]).map(Number);
        const waits = counts.reduce((a, b) => a + b, 0);
        const runDelayMs = (after.runDelayNs - before.runDelayNs) / 1e6;
        const slices = after.slices - before.slices;
        // The hog really shared the CPU: the kernel saw the statement wait for it.
        expect(runDelayMs).toBeGreaterThan(100);
        // One observation per slice that waited; the kernel counted the slices run.
        expect(waits).toBeGreaterThan(0.8 * slices);
        expect(waits).toBeLessThanOrEqual(slices + 2);
        // Total wait bracketed by the buckets: sum count×lower <= total < sum count×upper (µs, the
        // last bucket closed by the max), against the kernel's run_delay and query_stats.runq_wait_ms.
        const upperUs = (i: number) => Math.min(KERNEL_LAYOUT.upperUs(i), row.max_ms * 1000);
        const lower = counts.reduce((sum, c, i) => sum + c * KERNEL_LAYOUT.lowerUs(i), 0) / 1000;
        const upper = counts.reduce((sum, c, i) => sum + c * upperUs(i), 0) / 1000;
        expect(row.runq_wait_ms).toBeGreaterThanOrEqual(lower);
        expect(row.runq_wait_ms).toBeLessThanOrEqual(upper);
        expect(runDelayMs).toBeGreaterThanOrEqual(lower * 0.95);
        expect(runDelayMs).toBeLessThan(upper * 1.05);
        // Mass where the scheduler puts it: the hog runs a slice (a tick or two, 1–16 ms here)
        // before the backend gets the CPU back. Weighted by time, since this shared machine
        // adds many short waits (other tasks' wakeups) that hold little of the time.
        const timeIn = (fromUs: number, toUs: number) =>
          counts.reduce(
            (sum, c, i) =>
              KERNEL_LAYOUT.lowerUs(i) >= fromUs && KERNEL_LAYOUT.lowerUs(i) < toUs
                ? sum + (c * (KERNEL_LAYOUT.lowerUs(i) + upperUs(i))) / 2
                : sum,
            0,
          );
        const share = timeIn(1024, 16_384) / timeIn(0, Infinity);
        expect(share, `share of the wait in 1-16 ms waits: ${share}, counts ${JSON.stringify(counts)}`).toBeGreaterThan(0.7);
        expect(row.max_ms).toBeGreaterThan(1);
      } finally {
        hog.kill('SIGKILL');
      }
    });
  });
});

describe('llc set (proven with software page-fault events: the plumbing, not the PMU)', () => {
  it("is refused with the PMU probe's reason when the host has no hardware PMU, and check says the same", async () => {
    const pmu = loadNative().probePerfEvent(0, 3).ok; // PERF_TYPE_HARDWARE, cache-misses
    // A server of its own: this file's collector runs on `cluster`, and a second one is refused there.
    const own = await ThrowawayCluster.start();
    onTestFinished(() => own.stop());
    const started = Sidecar.start({ connectionString: own.connectionString(), intervalMs: 3_600_000, probeSets: ['llc'] });
    if (pmu) {
      // A host with a PMU: the same request must attach.
      const sidecar = await started;
      expect(sidecar.attached()).toContain('llc');
      await sidecar.stop();
      return;
    }
    await expect(started).rejects.toThrow(/probe set llc is not supported here: no hardware PMU/);
    const lines = await probeCapabilities({ dsn: own.connectionString() });
    expect(lines.find((l) => l.name === 'probes llc')?.detail).toMatch(/^unsupported: no hardware PMU/);
    expect(lines.find((l) => l.name === 'llc')?.detail).toMatch(/^unsupported: no hardware PMU/);
  });

  it('counts what the kernel counts for a backend and attributes it to the statement', async () => {
    await session(async (c, pid) => {
      await c.query("SET work_mem = '128MB'");
      await sidecar.flush();
      const base = await admin.query(
        'SELECT llc_references, llc_misses FROM bpf_stats.backend_stats WHERE pid = $1 AND exited_at IS NULL',
        [pid],
      );
      const before = faults(pid);
      await c.query('SELECT count(*) FROM (SELECT g FROM generate_series(1, 1500000) g ORDER BY g DESC) s');
      const after = faults(pid);
      await sidecar.flush();
      const now = await admin.query('SELECT llc_references, llc_misses FROM bpf_stats.backend_stats WHERE pid = $1 AND exited_at IS NULL', [
        pid,
      ]);
      const all = after.minflt + after.majflt - before.minflt - before.majflt;
      const minor = after.minflt - before.minflt;
      expect(all).toBeGreaterThan(1000);
      const refs = Number(now.rows[0].llc_references) - Number(base.rows[0]?.llc_references ?? 0);
      const misses = Number(now.rows[0].llc_misses) - Number(base.rows[0]?.llc_misses ?? 0);
      expect(refs / all).toBeGreaterThan(0.95);
      expect(refs / all).toBeLessThan(1.05);
      expect(misses / minor).toBeGreaterThan(0.95);
      expect(misses / minor).toBeLessThan(1.05);
    });
    const row = await rowFor('bpf_stats.query_llc', 'SELECT count(*) FROM (SELECT g FROM generate_series($1, $2) g ORDER BY g DESC) s');
    expect(Number(row.llc_references)).toBeGreaterThan(1000);
    expect(row.llc_miss_ratio).toBeGreaterThan(0.9); // all page faults here are minor
    expect(row.llc_miss_ratio).toBeLessThanOrEqual(1);
  });
});

describe('bpf_stats.hist_quantile', () => {
  const q = async (counts: number[], p: number, max: number) =>
    (await admin.query('SELECT bpf_stats.hist_quantile($1::bigint[], $2, $3) AS v', [counts, p, max])).rows[0].v as number | null;

  it("finds the quantile's log-linear bucket, interpolates inside it and never exceeds the max", async () => {
    // 10 observations in [1024, 1152) us (slot 64) and 10 in [8192, 9216) us (slot 88).
    const counts = Array.from({ length: 256 }, (_, i) => (i === 64 || i === 88 ? 10 : 0));
    expect(KERNEL_LAYOUT.lowerUs(64)).toBe(1024);
    expect(KERNEL_LAYOUT.lowerUs(88)).toBe(8192);
    expect(await q(counts, 0.25, 100)).toBeCloseTo(1.024 + 0.128 * 0.5, 6);
    // The top of the lower bucket (1.152) is kept within 10% of 1.024, its lowest value.
    expect(await q(counts, 0.5, 100)).toBeCloseTo(1.024 * 1.1, 6);
    expect(await q(counts, 0.99, 100)).toBeCloseTo(8.192 * 1.1, 6); // 8.192 + 1.024 * 0.98, kept within 10% likewise
    // The exact max closes the bucket that holds it: [8192, 9000) us here.
    expect(await q(counts, 0.99, 9)).toBeCloseTo(8.192 + 0.808 * 0.98, 6);
    expect(await q(counts, 1, 9)).toBe(9);
    expect(await q(Array(256).fill(0), 0.5, 0)).toBeNull();
    expect(await q(Array(33).fill(1), 0.5, 1)).toBeNull(); // no layout has 33 buckets
  });

  it('reads rows kept in the log2 layout (query_histograms_log2) as before', async () => {
    // 10 observations in [1024, 2048) us and 10 in [8192, 16384) us.
    const counts = Array.from({ length: 32 }, (_, i) => (i === 10 || i === 13 ? 10 : 0));
    expect(await q(counts, 0.25, 100)).toBeCloseTo(1.024 + 1.024 * 0.5, 6);
    expect(await q(counts, 0.5, 100)).toBeCloseTo(2.048, 6);
    expect(await q(counts, 0.99, 100)).toBeCloseTo(8.192 + 8.192 * 0.98, 6);
    // [8192, 9500) us once the max closes it: narrow enough to keep within 10% of all of it.
    expect(await q(counts, 0.99, 9.5)).toBeCloseTo(8.192 * 1.1, 6);
    expect(await q(counts, 0.99, 16)).toBeCloseTo(8.192 + 7.808 * 0.98, 6); // [8192, 16000) us: too wide, interpolated
    expect(await q(counts, 1, 9.5)).toBeCloseTo(8.192 * 1.1, 6);
  });

  it('computes what quantileUs computes, and hist_buckets shows the bounds of the layout', async () => {
    let seed = 11;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 20; round++) {
      const counts = Array.from({ length: 256 }, () => (rnd() < 0.15 ? Math.floor(rnd() * 50) : 0));
      let top = counts.length - 1;
      while (top >= 0 && counts[top] === 0) top--;
      if (top < 0) continue;
      const maxMs = Math.min(KERNEL_LAYOUT.upperUs(top), KERNEL_LAYOUT.lowerUs(top) * 1.05 + 1) / 1000;
      for (const p of [0.5, 0.95, 0.99]) {
        const ts = quantileUs(KERNEL_LAYOUT, counts, p, maxMs * 1000)! / 1000;
        expect(await q(counts, p, maxMs)).toBeCloseTo(ts, 9);
      }
    }
    const counts = Array.from({ length: 256 }, (_, i) => (i === 3 || i === 100 || i === 255 ? 1 : 0));
    const { rows } = await admin.query('SELECT * FROM bpf_stats.hist_buckets($1::bigint[], 20000000)', [counts]);
    expect(rows).toEqual([
      { bucket: 3, lower_ms: 0.003, upper_ms: 0.004, count: '1' },
      { bucket: 100, lower_ms: KERNEL_LAYOUT.lowerUs(100) / 1000, upper_ms: KERNEL_LAYOUT.upperUs(100) / 1000, count: '1' },
      { bucket: 255, lower_ms: KERNEL_LAYOUT.lowerUs(255) / 1000, upper_ms: 20000000, count: '1' },
    ]);
  });
});

describe('query_time', () => {
  it('partitions each query of a mixed workload: components sum to total_time_ms within 5%', async () => {
    await admin.query('CREATE TABLE IF NOT EXISTS io_target (id int, pad text)');
    await session((c) => c.query('SELECT count(*) FROM generate_series(1, 2000000) g WHERE g % 11 = 5')); // CPU
    await session((c) => c.query("SELECT pg_sleep_for('300 milliseconds')")); // sleep
    await session((holder) =>
      session(async (waiter) => {
        await holder.query('BEGIN');
        await holder.query('SELECT * FROM accounts WHERE id = 9 FOR UPDATE');
        const blocked = waiter.query('UPDATE accounts SET balance = balance + 2 WHERE id = 9');
        await new Promise((resolve) => setTimeout(resolve, 300));
        await holder.query('COMMIT');
        await blocked;
      }),
    ); // lock
    await session(async (c) => {
      await c.query("INSERT INTO io_target SELECT g, repeat('x', 500) FROM generate_series(1, 40000) g");
      await c.query('CHECKPOINT');
    }); // writes and a checkpoint
    await sidecar.flush();
    const { rows } = await admin.query(
      `SELECT t.query, t.total_time_ms, t.on_cpu_ms + t.runq_wait_ms + t.io_wait_ms + t.lock_wait_ms + t.lwlock_wait_ms + t.other_wait_ms AS parts,
              t.on_cpu_share + t.runq_wait_share + t.io_wait_share + t.lock_wait_share + t.lwlock_wait_share + t.other_wait_share AS shares,
              t.lock_wait_ms, t.other_wait_ms, t.on_cpu_ms, t.runq_wait_ms, s.total_exec_time
         FROM bpf_stats.query_time t JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)
        WHERE t.query ~ '(generate_series\\(\\$1, \\$2\\) g WHERE g % \\$3 = \\$4|pg_sleep_for|balance \\+ \\$1 WHERE id = \\$2|INSERT INTO io_target|CHECKPOINT)'`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(5);
    for (const row of rows) {
      expect(Math.abs(row.parts - row.total_time_ms), row.query).toBeLessThanOrEqual(0.05 * row.total_time_ms);
      expect(Math.abs(row.shares - 1), row.query).toBeLessThan(0.05);
      // The scheduler saw at least the time Postgres measured the statement executing.
      expect(row.total_time_ms, row.query).toBeGreaterThan(0.95 * row.total_exec_time);
    }
    const byText = (re: RegExp) => rows.find((r) => re.test(r.query))!;
    expect(byText(/pg_sleep_for/).other_wait_ms).toBeGreaterThan(0.9 * 300);
    expect(byText(/balance \+ \$1/).lock_wait_ms).toBeGreaterThan(0.75 * 300);
    // The CPU-bound statement ran or waited for a CPU (other work shares these cores): it never slept.
    const cpu = byText(/g % \$3/);
    expect(cpu.on_cpu_ms + cpu.runq_wait_ms).toBeGreaterThan(0.9 * cpu.total_time_ms);
  });
});
