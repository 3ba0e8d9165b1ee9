import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';
import { verifiedStatus } from '../../src/control/status-message.js';
import { Sidecar, type FlushReport } from '../../src/sidecar/sidecar.js';

/*
 * A plain login role (mallory) against a running collector, on a real cluster: it can create
 * objects in public (PostgreSQL 14's default, granted here by hand on 15+) and take any advisory
 * lock; a pg_monitor member (watcher) may hold a transaction open on bpf_stats. Ground truth for
 * "its code never ran as the collector": every object mallory plants writes a row into a table
 * it owns, naming the role it ran as. pg_stat_statements lives in its own schema (ext), so an
 * unqualified name would find mallory's forged public.pg_stat_statements first.
 */
const cli = cliPath();
const exec = promisify(execFile);
let cluster: ThrowawayCluster;
let admin: pg.Client; // superuser: the collector's role here

async function connectAs(user: string, database = 'postgres'): Promise<pg.Client> {
  const client = new pg.Client(cluster.connectionString(database).replace('postgres@', `${user}@`));
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function hijacks(): Promise<Array<{ what: string; ran_as: string }>> {
  return (await admin.query('SELECT what, ran_as FROM public.hijacked ORDER BY at')).rows;
}

/** `pg-bpf-stats <args>` to its end (or killed after timeoutMs): exit code, stderr. */
async function cliRun(args: string[], timeoutMs: number): Promise<{ code: number | null; stderr: string; killed: boolean }> {
  try {
    const { stderr } = await exec(process.execPath, [cli, ...args], { timeout: timeoutMs });
    return { code: 0, stderr, killed: false };
  } catch (error) {
    const e = error as { code: number | null; stderr: string; killed?: boolean };
    return { code: typeof e.code === 'number' ? e.code : null, stderr: e.stderr, killed: e.killed ?? false };
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LOCK_CLASS = 0x70676266;
const NODE_PG_MIGRATE_KEY = '7241865325823964';

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = await connectAs('postgres');
  await admin.query('CREATE SCHEMA ext');
  await admin.query('CREATE EXTENSION pg_stat_statements SCHEMA ext');
  await admin.query('GRANT USAGE ON SCHEMA ext TO PUBLIC');
  await admin.query('CREATE ROLE mallory LOGIN');
  await admin.query('GRANT CREATE ON SCHEMA public TO mallory');
  await admin.query('CREATE ROLE watcher LOGIN IN ROLE pg_monitor');
  await admin.query('CREATE DATABASE fresh');
  const mallory = await connectAs('mallory');
  await mallory.query(
    `CREATE TABLE public.hijacked (what text, ran_as name DEFAULT current_user, at timestamptz DEFAULT clock_timestamp())`,
  );
  await mallory.query('GRANT INSERT ON public.hijacked TO PUBLIC');
  // bigint * interval: the catalog has only float8 * interval, so this exact match would win.
  await mallory.query(`CREATE FUNCTION public.mul(bigint, interval) RETURNS interval LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO public.hijacked (what) VALUES ('bigint * interval'); RETURN $1::float8 * $2; END $$`);
  await mallory.query('CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.mul)');
  // integer ^ bigint (hist_quantile's 2 ^ slot): the catalog has float8 ^ float8 and numeric ^ numeric.
  await mallory.query(`CREATE FUNCTION public.pow(integer, bigint) RETURNS float8 LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO public.hijacked (what) VALUES ('integer ^ bigint'); RETURN pg_catalog.power($1, $2); END $$`);
  await mallory.query('CREATE OPERATOR public.^ (LEFTARG = integer, RIGHTARG = bigint, FUNCTION = public.pow)');
  // format(text, integer, text) (local_nodes' format): a better match than format(text, VARIADIC "any").
  await mallory.query(`CREATE FUNCTION public.format(text, integer, text) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO public.hijacked (what) VALUES ('format'); RETURN pg_catalog.format($1, $2, $3); END $$`);
  // A forged pg_stat_statements where an unqualified name would look first.
  await mallory.query(`CREATE FUNCTION public.forged(text) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO public.hijacked (what) VALUES ('pg_stat_statements'); RETURN 'forged by mallory'; END $$`);
  await mallory.query(`CREATE VIEW public.pg_stat_statements AS
    SELECT s.userid, s.dbid, s.toplevel, s.queryid, public.forged(s.query) AS query FROM ext.pg_stat_statements s`);
  await mallory.end();
  // The schema as a collector leaves it, so each test can be run alone.
  const migrated = await cliRun(['migrate', '--dsn', cluster.connectionString()], 60_000);
  expect(migrated.code, migrated.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  await admin?.end().catch(() => undefined);
  await cluster?.stop();
});

describe('objects a plain role creates on the search path', () => {
  it('never run as the collector: not in flushes, texts, maintenance or the views it ships; figures still flow', async () => {
    const sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs: 200,
      probeSets: ['query'],
      historyIntervalMs: 0,
      historyRetentionMs: 4000,
      historyPartitionMs: 1000,
      controlPollMs: 500,
    });
    try {
      const app = await connectAs('postgres');
      for (let i = 0; i < 20; i++) await app.query('SELECT $1::int + 1 AS hostile_roles_probe', [i]);
      await app.end();
      await sleep(300);
      for (let i = 0; i < 5; i++) {
        expect((await sidecar.flush()).error ?? null).toBeNull();
        await sleep(300);
      }
      // Figures and the real text arrived.
      const { rows } = await admin.query(
        `SELECT t.query, q.calls FROM bpf_stats.query_stats q JOIN bpf_stats.query_texts t USING (node, userid, dbid, toplevel, queryid)
          WHERE t.query LIKE '%hostile_roles_probe%'`,
      );
      expect(rows.length).toBe(1);
      expect(rows[0].query).toMatch(/^SELECT \$1::int \+ \$2 AS hostile_roles_probe$/);
      expect(Number(rows[0].calls)).toBe(20);
      const history = await admin.query('SELECT count(*)::int AS n FROM bpf_stats.query_stats_history');
      expect(history.rows[0].n).toBeGreaterThan(0);
    } finally {
      await sidecar.stop();
    }
    // What every reader of the views runs, with the reader's own (default) search path.
    const reader = await connectAs('postgres');
    await reader.query('SELECT * FROM bpf_stats.activity');
    await reader.query('SELECT * FROM bpf_stats.query_latency');
    expect(
      (await reader.query('SELECT bpf_stats.hist_quantile(array_fill(1::bigint, ARRAY[256]), 0.5, 100) AS q')).rows[0].q,
    ).toBeGreaterThan(0);
    await reader.end();
    expect(await hijacks()).toEqual([]);
  }, 60_000);

  it('rebuilding the row type and the views at an upgrade uses none of them', async () => {
    // oid <> integer: the catalog has only oid <> oid, so this exact match would win where the
    // view rebuild reads which grants to give back.
    const mallory = await connectAs('mallory');
    await mallory.query(`CREATE FUNCTION public.oid_ne(oid, integer) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO public.hijacked (what) VALUES ('oid <> integer'); RETURN $1 <> $2::oid; END $$`);
    await mallory.query('CREATE OPERATOR public.<> (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.oid_ne)');
    await mallory.query('CREATE DOMAIN public.int8 AS numeric CHECK (VALUE > 0)');
    await mallory.end();
    // As an older version left them: a view column where the head has another, the row type in
    // another order.
    await admin.query(`DROP VIEW bpf_stats.query_io;
      CREATE VIEW bpf_stats.query_io AS SELECT q.node, q.calls AS older_column FROM bpf_stats.query_stats q;
      ALTER TYPE bpf_stats.query_increments DROP ATTRIBUTE calls, ADD ATTRIBUTE calls int8;
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    const result = await cliRun(['migrate', '--dsn', cluster.connectionString()], 60_000);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/re-creating the bpf_stats views/);
    expect(await hijacks()).toEqual([]);
    const { rows } = await admin.query(
      `SELECT DISTINCT pg_catalog.format_type(a.atttypid, a.atttypmod) AS type FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = (SELECT typrelid FROM pg_catalog.pg_type WHERE oid = 'bpf_stats.query_increments'::regtype) AND a.attnum > 0 ORDER BY 1`,
    );
    expect(rows.map((r) => r.type)).toEqual(['bigint', 'boolean', 'double precision', 'oid']);
  }, 90_000);
});

describe('locks and long transactions another role holds', () => {
  it('a squatter on the collector lock does not make run refuse', async () => {
    const squatters = [await connectAs('mallory', 'fresh'), await connectAs('mallory')];
    for (const s of squatters) await s.query('SELECT pg_advisory_lock($1, 1)', [LOCK_CLASS]);
    const child = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString('fresh'), '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/attached probe sets/);
      const fresh = await connectAs('postgres', 'fresh');
      await expect
        .poll(async () => (await fresh.query("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'bpf_stats'")).rows[0].n, {
          timeout: 30_000,
        })
        .toBe(1);
      await expect
        .poll(async () => (await fresh.query('SELECT count(*)::int AS n FROM bpf_stats.backend_stats')).rows[0].n, { timeout: 30_000 })
        .toBeGreaterThan(0);
      await fresh.end();
      expect(child.exitCode, stderr).toBeNull();
      expect(stderr).toMatch(/lock is held by backend \d+ \(role mallory\), which is not a collector: ignored/);
    } finally {
      child.kill('SIGTERM');
      await exited;
      for (const s of squatters) await s.end();
    }
  }, 90_000);

  it('history maintenance goes on under a squatted lock and an open pg_monitor transaction: every flush commits', async () => {
    const squatter = await connectAs('mallory');
    await squatter.query("SELECT pg_advisory_lock(hashtext('bpf_stats.history'))");
    const watcher = await connectAs('watcher');
    await watcher.query('BEGIN');
    await watcher.query('SELECT count(*) FROM bpf_stats.query_stats_history');
    await watcher.query('SELECT count(*) FROM bpf_stats.backend_stats_history');
    const reports: FlushReport[] = [];
    let sidecar: Sidecar | undefined;
    try {
      sidecar = await Sidecar.start({
        connectionString: cluster.connectionString(),
        intervalMs: 250,
        historyIntervalMs: 0,
        historyRetentionMs: 3000,
        historyPartitionMs: 1000,
        healthHeartbeatMs: 0,
      });
      sidecar.onFlush((report) => reports.push(report));
      // Six partition widths (without new partitions the inserts fail after two), with statements
      // to measure so that every flush has rows to write.
      const app = await connectAs('postgres');
      for (const end = Date.now() + 6000; Date.now() < end; ) await app.query('SELECT pg_sleep(0.05)');
      await app.end();
      const failed = reports.filter((r) => r.error);
      expect(failed.map((r) => r.error)).toEqual([]);
      expect(reports.length).toBeGreaterThan(10);
      const recent = await admin.query(
        "SELECT count(*)::int AS n FROM bpf_stats.backend_stats_history WHERE ts > now() - interval '1.5 seconds'",
      );
      expect(recent.rows[0].n).toBeGreaterThan(0);
    } finally {
      await sidecar?.stop();
      await watcher.query('ROLLBACK');
      await watcher.end();
      await squatter.end();
    }
  }, 60_000);

  it('migrate ignores squatted migration locks', async () => {
    const squatter = await connectAs('mallory');
    await squatter.query(`SELECT pg_advisory_lock(${NODE_PG_MIGRATE_KEY})`);
    await squatter.query("SELECT pg_advisory_lock(hashtext('bpf_stats.sql'))");
    await squatter.query('SELECT pg_advisory_lock($1, 2)', [LOCK_CLASS]);
    try {
      const result = await cliRun(['migrate', '--dsn', cluster.connectionString()], 40_000);
      expect(result.killed, 'migrate waited for a lock mallory holds').toBe(false);
      expect(result.code, result.stderr).toBe(0);
    } finally {
      await squatter.end();
    }
  }, 60_000);

  it('migrate never waits forever behind an open transaction: one line, exit 2', async () => {
    const watcher = await connectAs('watcher');
    await watcher.query('BEGIN');
    await watcher.query('SELECT count(*) FROM bpf_stats.query_time');
    try {
      const result = await cliRun(['migrate', '--dsn', cluster.connectionString()], 40_000);
      expect(result.killed, 'migrate still waiting after 40 s').toBe(false);
      expect(result.code, result.stderr).toBe(2);
      // Its log lines, then the failure in one line (no stack).
      const lines = result.stderr
        .trim()
        .split('\n')
        .filter((l) => !/ INFO /.test(l));
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(/ERROR cannot bring the bpf_stats schema up to date: a lock on it stayed held for 10 s/);
    } finally {
      await watcher.query('ROLLBACK');
      await watcher.end();
    }
  }, 60_000);
});

describe('status messages on bpf_stats_status', () => {
  it('a forgery from any role is told apart from the collector’s own message', async () => {
    await admin.query('CREATE ROLE dba LOGIN IN ROLE bpf_stats_admin');
    const sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 200, controlPollMs: 200 });
    const listener = await connectAs('dba');
    const seen: string[] = [];
    listener.on('notification', (n) => n.payload !== undefined && seen.push(n.payload));
    await listener.query('LISTEN bpf_stats_status');
    const mallory = await connectAs('mallory');
    try {
      const id = Number((await listener.query("SELECT bpf_stats.collect('{query}', interval '1 hour') AS id")).rows[0].id);
      await expect
        .poll(() => seen.some((p) => JSON.parse(p).id === id && JSON.parse(p).status === 'running'), { timeout: 10_000 })
        .toBe(true);
      const forged = JSON.stringify({ id, status: 'done' });
      await mallory.query(`SELECT pg_notify('bpf_stats_status', $1)`, [forged]);
      await expect.poll(() => seen.includes(forged), { timeout: 5000 }).toBe(true);
      // The forgery names a status the row does not have; the collector's message is confirmed.
      expect(await verifiedStatus(listener, forged)).toBeNull();
      const real = seen.find((p) => JSON.parse(p).id === id && JSON.parse(p).status === 'running')!;
      expect(await verifiedStatus(listener, real)).toEqual({ id: String(id), status: 'running', error: null });
      expect(await verifiedStatus(listener, 'not json')).toBeNull();
      expect(sidecar.controlPlane?.runningIds()).toContain(String(id));
    } finally {
      await mallory.end();
      await listener.end();
      await sidecar.stop();
    }
  }, 60_000);
});
