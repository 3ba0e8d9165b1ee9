import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';
import { busyBackend } from '../support/busy-backend.js';
import { cpuTimeMs } from '../support/cpu-time.js';
import { hostPidOf, INSIDE_BIN, INSIDE_DATA, NamespacedCluster } from '../support/namespaced-cluster.js';
import { unseenCompletions } from '../support/unseen-completions.js';

/*
 * PostgreSQL in a container (its own pid and mount namespaces, binaries and data at paths the
 * host does not have), with the collector in both placements: on the host (TCP DSN), and
 * inside the container's pid and mount namespaces (nsenter -p -m, as a pod's sidecar with a
 * shared process namespace). The same ground truth as on a bare host: a CPU-bound query's
 * on-CPU time against the kernel's CPU time of its backend (/proc/<host pid>/stat) and
 * pg_stat_statements' execution time; a cold scan's block reads against the relation's size;
 * exact calls against pg_stat_statements; and no row that is not one of the postmaster's
 * processes (pg_stat_activity, the postmaster itself).
 */
const cli = cliPath();
const run = promisify(execFile);
let cluster: NamespacedCluster;
let admin: pg.Client;
let relationBytes = 0;
let coldPath = '';

beforeAll(async () => {
  // Small shared buffers: a scan of the test table goes through a ring, so it reads from the OS cache or disk.
  cluster = await NamespacedCluster.start({ shared_buffers: "'16MB'" });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 200000) g");
  await admin.query('VACUUM (FREEZE) cold');
  relationBytes = Number((await admin.query("SELECT pg_relation_size('cold') AS n")).rows[0].n);
  const inside = (await admin.query("SELECT current_setting('data_directory') AS d, pg_relation_filepath('cold') AS p")).rows[0];
  expect(inside.d).toBe(INSIDE_DATA); // a path the host does not have
  coldPath = join(cluster.hostDataDir, inside.p);
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

interface Collector {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<number | null>;
}

async function startCollector(prefix: string[]): Promise<Collector> {
  const [file, ...argv] = [
    ...prefix,
    process.execPath,
    cli,
    'run',
    '--dsn',
    cluster.childConnectionString(),
    '--interval',
    '200ms',
    '--probes',
    'query',
  ];
  const child = spawn(file!, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: cluster.childEnv() });
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const deadline = Date.now() + 30_000;
  // Started means past Sidecar.start (run logs "collecting every" then), not just attached: a
  // test that crashes the postmaster while start is still writing its first rows would end the
  // start, not test the following (seen under two CPU hogs).
  while (!/attached probe sets: .*query/.test(stderr) || !/collecting every \d+ ms/.test(stderr)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the collector did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, stderr: () => stderr, exited };
}

/** A statement's row beside pg_stat_statements' (numbers as float8). */
interface StatsRow {
  pgss_calls: number;
  total_exec_time: number;
  calls: number;
  on_cpu_ms: number;
  runq_wait_ms: number;
  blk_read_bytes: number;
}

/** The query_stats row of the one statement matching `pattern`, beside pg_stat_statements', once a flush wrote `until`. */
async function statsFor(pattern: string, until: (row: StatsRow) => boolean) {
  let row: StatsRow | undefined;
  await expect
    .poll(
      async () => {
        const { rows } = await admin.query<StatsRow>(
          `SELECT s.calls::float8 AS pgss_calls, s.total_exec_time, q.calls::float8 AS calls, q.on_cpu_ms, q.runq_wait_ms, q.blk_read_bytes::float8 AS blk_read_bytes
             FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query LIKE $1`,
          [pattern],
        );
        row = rows[0];
        return rows.length === 1 && until(rows[0]!);
      },
      { timeout: 10_000, interval: 200 },
    )
    .toBe(true);
  return row!;
}

describe.each([
  ['on the host, Postgres in a container (TCP DSN)', 'host'],
  ['inside the container\u2019s pid and mount namespaces (nsenter -p -m)', 'inside'],
] as const)('the collector %s', (_title, placement) => {
  let collector: Collector;

  beforeAll(async () => {
    await admin.query('SELECT pg_stat_statements_reset()');
    await admin.query('DROP SCHEMA IF EXISTS bpf_stats CASCADE');
    collector = await startCollector(placement === 'inside' ? cluster.inside([]) : []);
  }, 60_000);

  /** The collector's process: nsenter forks into the pid namespace and does not pass signals on, so there it is nsenter's child. */
  const collectorPid = () =>
    placement === 'inside'
      ? Number(readFileSync(`/proc/${collector.child.pid}/task/${collector.child.pid}/children`, 'utf8').trim())
      : collector.child.pid!;

  afterAll(async () => {
    process.kill(collectorPid(), 'SIGTERM');
    expect(await collector?.exited).toBe(0);
  });

  it('names the postmaster by its pid in the container, the host pid BPF filters on, and the binary through its root', () => {
    const line = collector
      .stderr()
      .split('\n')
      .find((l) => /postmaster \d+/.test(l))!;
    const host = cluster.postmasterHostPid();
    expect(line).toContain(`postmaster ${cluster.postmasterNsPid()} (pid ${host} on the host, pid namespace level 1)`);
    expect(line).toContain(placement === 'inside' ? `${INSIDE_BIN}/postgres` : `/proc/${host}/root${INSIDE_BIN}/postgres`);
  });

  // From the host, a real container's backends are checked the same way (containers.test.ts);
  // inside the server's mount namespace only here.
  if (placement === 'inside') {
    it("gives a CPU-bound query its backend's kernel CPU time and pg_stat_statements' execution time, within 15%", async () => {
      const client = new pg.Client(cluster.connectionString());
      await client.connect();
      try {
        const nsPid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const hostPid = hostPidOf(nsPid, cluster.postmasterHostPid());
        const before = cpuTimeMs(hostPid);
        await client.query('SELECT count(*) FROM generate_series(1, 3000000) g WHERE g % 7 = 0');
        const kernelCpuMs = cpuTimeMs(hostPid) - before;
        const row = await statsFor('%generate_series($1, $2) g WHERE g % $3 = $4', (r) => r.calls === 1);
        expect(kernelCpuMs).toBeGreaterThan(150);
        expect(row.on_cpu_ms / kernelCpuMs).toBeGreaterThan(0.85);
        expect(row.on_cpu_ms / kernelCpuMs).toBeLessThan(1.15);
        expect((row.on_cpu_ms + row.runq_wait_ms) / row.total_exec_time).toBeGreaterThan(0.85);
        expect((row.on_cpu_ms + row.runq_wait_ms) / row.total_exec_time).toBeLessThan(1.15);
      } finally {
        await client.end();
      }
    });

    it('counts calls exactly as pg_stat_statements does', async () => {
      const client = new pg.Client(cluster.connectionString());
      await client.connect();
      try {
        for (let i = 0; i < 300; i++) await client.query('SELECT $1::int + 1 AS exact_calls', [i]);
      } finally {
        await client.end();
      }
      const row = await statsFor('SELECT $1::int + $2 AS exact_calls', (r) => r.calls === r.pgss_calls);
      expect(row.pgss_calls).toBe(300);
      expect(row.calls).toBe(300);
    });
  }

  it("charges a cold scan's block reads to its query: at least what Postgres read, at most the relation", async () => {
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    let unseen = { bytes: 0, requests: 0 };
    // Blocks still in shared buffers (the table's creation and VACUUM left up to 16 MB there) are
    // not read at all: the ground truth is what the scan read, pg_stat_statements' shared_blks_read,
    // all from disk once the page cache is emptied. (PostgreSQL 15 cannot drop one relation's buffers.)
    const readBytes = async () =>
      Number(
        (
          await admin.query(
            `SELECT coalesce(sum(shared_blks_read), 0) * current_setting('block_size')::bigint AS n FROM pg_stat_statements WHERE query = 'SELECT count(pad) FROM cold'`,
          )
        ).rows[0].n,
      );
    let scanRead = 0;
    try {
      await client.query('EXPLAIN SELECT count(pad) FROM cold'); // catalogs cached first
      const nsPid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      expect(evictFromPageCache(coldPath), 'bytes of the relation still cached').toBe(0);
      const readBefore = await readBytes();
      await client.query('SELECT count(pad) FROM cold');
      scanRead = (await readBytes()) - readBefore;
      // Completions no program saw are charged when their request struct is reused: later.
      unseen = unseenCompletions(hostPidOf(nsPid, cluster.postmasterHostPid()), collectorPid());
    } finally {
      await client.end();
    }
    const row = await statsFor('SELECT count(pad) FROM cold', (r) => r.calls === 1 && r.blk_read_bytes > 0);
    const charged = row.blk_read_bytes + unseen.bytes;
    console.log(
      `cold scan (${placement}): relation ${relationBytes} B, read by the scan ${scanRead} B; query blk_read_bytes ${row.blk_read_bytes}, ${unseen.bytes} B in ${unseen.requests} completed unseen so far`,
    );
    // Most of it was read (the buffers hold at most a third of the relation). Every block the scan
    // read came from the disk; the kernel's readahead may also have read blocks the buffers held,
    // but nothing beyond the file.
    expect(scanRead / relationBytes).toBeGreaterThan(0.6);
    expect(charged / scanRead).toBeGreaterThan(0.9);
    expect(charged / relationBytes).toBeLessThan(1.1);
  });

  it("writes only the postmaster's own processes: no kernel thread, no other process of the host", async () => {
    await new Promise((r) => setTimeout(r, 500));
    const { rows } = await admin.query(`
      SELECT b.pid, b.backend_type FROM bpf_stats.backend_stats b
       WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = b.pid)
         AND b.exited_at IS NULL`);
    // Every live row is a pg_stat_activity pid, or the postmaster itself.
    expect(rows).toEqual([{ pid: cluster.postmasterNsPid(), backend_type: 'postmaster' }]);
    const { rows: all } = await admin.query('SELECT count(*)::int AS n FROM bpf_stats.backend_stats');
    expect(all[0].n).toBeGreaterThan(3);
  });
});

describe('the collector on the host, across a crash of the container\u2019s postmaster', () => {
  it('follows the postmaster pg_ctl starts again inside, not a backend the crash left running', async () => {
    await admin.query('SELECT pg_stat_statements_reset()');
    const collector = await startCollector([]);
    try {
      const orphan = await busyBackend(cluster.connectionString());
      const oldNsPid = cluster.postmasterNsPid();
      admin.on('error', () => undefined); // its backend goes with the postmaster
      process.kill(cluster.postmasterHostPid(), 'SIGKILL');
      // As the container's supervisor would: pg_ctl start inside, once the old one's processes are gone.
      const killedAt = Date.now();
      for (;;) {
        try {
          await run('nsenter', [
            '-t',
            String(cluster.initHostPid),
            '-p',
            '-m',
            '--',
            'runuser',
            '-u',
            'postgres',
            '--',
            `${INSIDE_BIN}/pg_ctl`,
            '-D',
            INSIDE_DATA,
            '-l',
            '/srv/pgdata/server.log',
            '-w',
            '-t',
            '60',
            'start',
          ]);
          break;
        } catch (error) {
          if (Date.now() > killedAt + 30_000) throw error;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      await orphan.done;
      const newNsPid = cluster.postmasterNsPid();
      expect(newNsPid).not.toBe(oldNsPid);
      await admin.end().catch(() => undefined);
      admin = new pg.Client(cluster.connectionString());
      await admin.connect();
      for (let i = 0; i < 200; i++) await admin.query('SELECT $1::int AS after_container_crash', [i]);
      // pg_stat_statements lost its counts in the crash: both count the 200 calls since.
      const row = await statsFor('SELECT $1::int AS after_container_crash', (r) => r.calls >= 200);
      expect(row.calls).toBe(200);
      expect(row.pgss_calls).toBe(200);
      expect(collector.stderr()).toMatch(new RegExp(`following postmaster ${newNsPid} \\(pid ${cluster.postmasterHostPid()} for BPF`));
      expect(collector.stderr()).not.toMatch(new RegExp(`following postmaster ${orphan.pid} `));
    } finally {
      collector.child.kill('SIGTERM');
      expect(await collector.exited, collector.stderr()).toBe(0);
    }
  });
});

describe('a pid namespace that cannot be translated', () => {
  it('collector in a pid namespace that cannot see the server: one line, exit 2, nothing created', async () => {
    const host = await ThrowawayCluster.start();
    try {
      let outcome: { code: number; stderr: string };
      try {
        await run(
          'unshare',
          ['--pid', '--fork', '--mount', '--mount-proc', process.execPath, cli, 'run', '--dsn', host.connectionString()],
          { timeout: 60_000 },
        );
        outcome = { code: 0, stderr: '' };
      } catch (error) {
        outcome = error as { code: number; stderr: string };
      }
      expect(outcome.code).toBe(2);
      const lines = outcome.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^\S+Z ERROR postmaster not found: backend pid \d+ of this connection is not a PostgreSQL process on this host, nor in a pid namespace this host can see/,
      );
      const c = new pg.Client(host.connectionString());
      await c.connect();
      const { rows } = await c.query("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'bpf_stats'");
      await c.end();
      expect(rows[0].n).toBe(0);
    } finally {
      await host.stop();
    }
  });
});
