import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { ownProgramNames } from '../support/own-bpf.js';
import { KernelFeatures } from '../../src/collector/kernel-features.js';
import { switchProgram } from '../../src/collector/switch-program.js';

/*
 * The control plane against a real private cluster, a real Sidecar and real NOTIFY: requests
 * made with bpf_stats.collect()/stop() (or rows inserted by hand) attach and detach probe sets,
 * which is checked on the sidecar and against pg_stat_statements (the query set's calls).
 */
let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client; // superuser: the sidecar's role here, used to look and to insert rows by hand
let dba: pg.Client; // a member of bpf_stats_admin
let watcher: pg.Client; // LISTENs on bpf_stats_status
const statuses: Array<{ id: number; status: string; error?: string; at: number }> = [];
const logs: string[] = [];

async function connectAs(user: string): Promise<pg.Client> {
  const client = new pg.Client(cluster.connectionString().replace('postgres@', `${user}@`));
  await client.connect();
  return client;
}

/** Resolves with the bpf_stats_status notification for (id, status), failing after a while. */
async function statusOf(id: number, status: string, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const hit = statuses.find((s) => s.id === id && s.status === status);
    if (hit) return hit;
    if (Date.now() > deadline) {
      const row = (await admin.query('SELECT status, error FROM bpf_stats.collections WHERE id = $1', [id])).rows[0];
      throw new Error(
        `no ${status} notification for request ${id}; row is ${JSON.stringify(row)}, seen ${JSON.stringify(statuses.filter((s) => s.id === id))}`,
      );
    }
    await sleep(20);
  }
}

async function row(id: number) {
  return (
    await admin.query('SELECT *, extract(epoch FROM finished_at - started_at)::float8 AS ran_s FROM bpf_stats.collections WHERE id = $1', [
      id,
    ])
  ).rows[0];
}

async function collect(probes: string, duration: string | null): Promise<number> {
  return Number((await dba.query('SELECT bpf_stats.collect($1::text[], $2::interval) AS id', [probes, duration])).rows[0].id);
}

/** Runs `sql` n times in a fresh session; returns our calls and pg_stat_statements' for it. */
async function callsFor(sql: string, n: number, pattern: string) {
  const c = await connectAs('postgres');
  for (let i = 0; i < n; i++) await c.query(sql, [i]);
  await c.end();
  await sidecar.flush();
  const { rows } = await admin.query(
    `SELECT s.calls AS pgss_calls, q.calls FROM pg_stat_statements s
       JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid) WHERE s.query LIKE $1`,
    [pattern],
  );
  expect(rows, `one statement matches ${pattern}`).toHaveLength(1);
  return { ours: rows[0].calls === null ? null : Number(rows[0].calls), pgss: Number(rows[0].pgss_calls) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = await connectAs('postgres');
  await admin.query('CREATE EXTENSION pg_stat_statements');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 500,
    // No safety poll during the test: a pick-up must come from the doorbell or a reconnect.
    controlPollMs: 3_600_000,
    log: (line) => logs.push(line),
  });
  await admin.query('CREATE ROLE dba LOGIN IN ROLE bpf_stats_admin');
  await admin.query('CREATE ROLE watcher LOGIN IN ROLE pg_monitor');
  await admin.query('CREATE ROLE nobody LOGIN');
  dba = await connectAs('dba');
  watcher = await connectAs('watcher');
  watcher.on('notification', (n) => {
    const payload = JSON.parse(n.payload!);
    statuses.push({ ...payload, at: performance.now() });
  });
  await watcher.query('LISTEN bpf_stats_status');
});

afterAll(async () => {
  if (process.env.SHOW_LOGS) console.log(logs.join('\n'));
  await sidecar?.stop();
  for (const c of [admin, dba, watcher]) await c?.end().catch(() => undefined);
  await cluster?.stop();
});

describe('control plane', () => {
  it('attaches the query set for the requested 2 seconds: pending -> running -> done', async () => {
    expect(sidecar.attached()).not.toContain('query');
    // Started with the default sets, the sidecar verified their programs only: query's comes with the request.
    expect(ownProgramNames()).toContain(switchProgram(KernelFeatures.host()));
    expect(ownProgramNames()).not.toContain('on_query_done');
    const id = await collect('{query}', '2 seconds');
    const requested = await row(id);
    expect(requested.requested_by).toBe('dba');
    expect(['pending', 'running']).toContain(requested.status);
    const running = await statusOf(id, 'running');
    expect((await row(id)).status).toBe('running');
    expect(sidecar.attached()).toContain('query');
    expect(ownProgramNames()).toContain('on_query_done');
    // Calls are counted exactly while it runs (ground truth: pg_stat_statements).
    const during = await callsFor('SELECT $1::int + 17', 25, 'SELECT $1::int + $2');
    expect(during).toEqual({ ours: 25, pgss: 25 });

    const done = await statusOf(id, 'done');
    expect(done.at - running.at).toBeGreaterThan(1800);
    expect(done.at - running.at).toBeLessThan(3500);
    const finished = await row(id);
    expect(finished.status).toBe('done');
    expect(finished.ran_s).toBeGreaterThan(1.9);
    expect(finished.ran_s).toBeLessThan(3);
    expect(sidecar.attached()).not.toContain('query');
    expect(sidecar.attached()).toContain('cpu');
    // Detached: statements of a new shape get no calls any more.
    await sidecar.flush();
    expect(await callsFor('SELECT $1::int + 18, 1', 5, 'SELECT $1::int + $2, $3')).toEqual({ ours: null, pgss: 5 });
  });

  it('stop(id) ends a request made without a duration and detaches its set', async () => {
    const id = await collect('{query}', null);
    await statusOf(id, 'running');
    expect(sidecar.attached()).toContain('query');
    expect((await dba.query('SELECT bpf_stats.stop($1) AS stopped', [id])).rows[0].stopped).toBe(true);
    await statusOf(id, 'stopped');
    expect(sidecar.attached()).not.toContain('query');
    expect((await row(id)).status).toBe('stopped');
    // Stopping again says it had ended; an unknown id is an error.
    expect((await dba.query('SELECT bpf_stats.stop($1) AS stopped', [id])).rows[0].stopped).toBe(false);
    await expect(dba.query('SELECT bpf_stats.stop(987654)')).rejects.toThrow(/no collection request 987654/);
  });

  it('a pending request stopped before the sidecar took it never starts', async () => {
    await dba.query('BEGIN');
    const id = Number((await dba.query("SELECT bpf_stats.collect('{query}', '5 s') AS id")).rows[0].id);
    await dba.query('SELECT bpf_stats.stop($1)', [id]);
    await dba.query('COMMIT');
    await sleep(300);
    await sidecar.controlPlane!.settled();
    const r = await row(id);
    expect(r.status).toBe('stopped');
    expect(r.started_at).toBeNull();
    expect(sidecar.attached()).not.toContain('query');
  });

  it('rejects unknown probe sets, naming them', async () => {
    const id = await collect('{query,nosuch,"x; DROP TABLE bpf_stats.query_stats"}', '5 seconds');
    const rejected = await statusOf(id, 'rejected');
    expect(rejected.error).toMatch(/unknown probe set "nosuch", "x; DROP TABLE bpf_stats.query_stats"/);
    const r = await row(id);
    expect(r.status).toBe('rejected');
    expect(r.error).toBe(rejected.error);
    expect(r.started_at).toBeNull();
    expect(sidecar.attached()).not.toContain('query');
    expect((await admin.query("SELECT to_regclass('bpf_stats.query_stats') AS t")).rows[0].t).toBe('bpf_stats.query_stats');
  });

  it('rejects bad durations in collect() and in rows inserted by hand', async () => {
    for (const bad of ['-1 second', '0', '25 hours', '1 month']) {
      await expect(collect('{query}', bad), bad).rejects.toThrow(/out of range/);
    }
    await expect(collect('{}', '1 s')).rejects.toThrow(/1 to 32 probe sets/);
    // Rows can bypass the function: the sidecar checks them too.
    const ids: number[] = [];
    for (const [probes, duration] of [
      ['{query}', '-5 s'],
      ['{query}', '0'],
      ['{query}', '2 days'],
      ['{query}', '1 mon'],
      ['{}', '1 s'],
      ['{NULL}', '1 s'],
    ]) {
      ids.push(
        Number(
          (await admin.query('INSERT INTO bpf_stats.collections (probes, duration) VALUES ($1, $2) RETURNING id', [probes, duration]))
            .rows[0].id,
        ),
      );
    }
    await admin.query("NOTIFY bpf_stats_control, ''");
    for (const id of ids) {
      await statusOf(id, 'rejected');
      expect((await row(id)).error).toMatch(/out of range|1 to 32 probe sets|1 to 63 characters/);
    }
    expect(sidecar.attached()).not.toContain('query');
  });

  it('lets only bpf_stats_admin members request, pg_monitor members read, and PUBLIC nothing', async () => {
    const nobody = await connectAs('nobody');
    try {
      await expect(nobody.query("SELECT bpf_stats.collect('{query}', '1 s')")).rejects.toMatchObject({ code: '42501' });
      await expect(nobody.query('SELECT bpf_stats.stop(1)')).rejects.toMatchObject({ code: '42501' });
      await expect(nobody.query('SELECT count(*) FROM bpf_stats.query_stats')).rejects.toMatchObject({ code: '42501' });
      await expect(nobody.query('SELECT count(*) FROM bpf_stats.collections')).rejects.toMatchObject({ code: '42501' });
      await expect(nobody.query("INSERT INTO bpf_stats.collections (probes) VALUES ('{query}')")).rejects.toMatchObject({ code: '42501' });
      // Even EXECUTE granted to PUBLIC by mistake lets nobody in: the functions check membership.
      await admin.query(
        'GRANT USAGE ON SCHEMA bpf_stats TO PUBLIC; GRANT EXECUTE ON FUNCTION bpf_stats.collect(text[], interval, text) TO PUBLIC',
      );
      await expect(nobody.query("SELECT bpf_stats.collect('{query}', '1 s')")).rejects.toThrow(/nobody is not a member of bpf_stats_admin/);
      await admin.query(
        'REVOKE USAGE ON SCHEMA bpf_stats FROM PUBLIC; REVOKE EXECUTE ON FUNCTION bpf_stats.collect(text[], interval, text) FROM PUBLIC',
      );
    } finally {
      await nobody.end();
    }
    await sidecar.flush();
    expect(Number((await watcher.query('SELECT count(*) FROM bpf_stats.query_stats')).rows[0].count)).toBeGreaterThan(0);
    await watcher.query('SELECT * FROM bpf_stats.backend_stats, bpf_stats.collections, bpf_stats.query_time, bpf_stats.activity LIMIT 1');
    await expect(watcher.query("SELECT bpf_stats.collect('{query}', '1 s')")).rejects.toMatchObject({ code: '42501' });
    await expect(watcher.query("UPDATE bpf_stats.collections SET status = 'done'")).rejects.toMatchObject({ code: '42501' });
    // A view the sidecar's role creates later is readable too (default privileges).
    await admin.query('CREATE VIEW bpf_stats.later_view AS SELECT 1 AS one');
    expect((await watcher.query('SELECT one FROM bpf_stats.later_view')).rows).toEqual([{ one: 1 }]);
    await admin.query('DROP VIEW bpf_stats.later_view');
    // Admins see their requests but cannot change them by hand.
    await dba.query('SELECT id, status FROM bpf_stats.collections');
    await expect(dba.query("UPDATE bpf_stats.collections SET status = 'done'")).rejects.toMatchObject({ code: '42501' });
  });

  it('ignores garbage on the control channel while collecting, with one log line', async () => {
    const id = await collect('{query}', '3 seconds');
    await statusOf(id, 'running');
    const before = (await admin.query('SELECT id, status, probes, duration FROM bpf_stats.collections ORDER BY id')).rows;
    const flushedAt = sidecar.lastFlush!.at.getTime();
    const logged = logs.length;
    const junk = ['garbage', 'x'.repeat(7999), '{"id":"1; DROP TABLE bpf_stats.collections"}', '{"id": -1}', '99999999999999999999999'];
    for (const payload of junk) await admin.query('SELECT pg_notify($1, $2)', ['bpf_stats_control', payload]);
    await expect(admin.query("SELECT pg_notify('bpf_stats_control', repeat('y', 8000))")).rejects.toThrow(/payload string too long/);
    for (let i = 0; i < 50; i++) await admin.query(`NOTIFY bpf_stats_control, 'junk ${i}'`);
    await sleep(1200);
    const junkLines = logs.slice(logged).filter((l) => l.includes('malformed'));
    expect(junkLines).toHaveLength(1);
    expect(junkLines[0]).toMatch(/ignoring a malformed \d+-byte payload on bpf_stats_control/);
    // Collection went on: flushes continue, the request is untouched and ends on time.
    expect(sidecar.lastFlush!.at.getTime()).toBeGreaterThan(flushedAt);
    expect(sidecar.lastFlush!.error).toBeNull();
    expect(sidecar.attached()).toContain('query');
    const after = (await admin.query('SELECT id, status, probes, duration FROM bpf_stats.collections ORDER BY id')).rows;
    expect(after).toEqual(before);
    await statusOf(id, 'done');
    expect(sidecar.attached()).not.toContain('query');
  });

  it('keeps its own LISTEN and control connections out of the figures', async () => {
    await sidecar.flush();
    const own = await admin.query(
      "SELECT pid FROM pg_stat_activity WHERE application_name IN ('pg-bpf-stats listener', 'pg-bpf-stats control')",
    );
    expect(own.rows).toHaveLength(2);
    const { rows } = await admin.query('SELECT pid FROM bpf_stats.backend_stats WHERE pid = ANY($1)', [own.rows.map((r) => r.pid)]);
    expect(rows).toEqual([]);
    // No statement of theirs either (pg_stat_statements sees them; we must not).
    const theirs = await admin.query(
      `SELECT s.query FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
        WHERE s.query LIKE 'LISTEN%bpf_stats_control%' OR s.query LIKE '%FROM bpf_stats.collections%WHERE status IN%'`,
    );
    expect(theirs.rows).toEqual([]);
  });

  it('reconnects after its listener is terminated and takes the request made while it was away', async () => {
    const old = Number(
      (await admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = 'pg-bpf-stats listener'")).rows[0].pid,
    );
    // While nobody can connect, the listener is terminated (and waited for) and a request is
    // made: its doorbell rings for nobody. Only the reconcile on reconnect can find it.
    const other = new pg.Client(cluster.connectionString('template1'));
    await other.connect();
    await other.query('ALTER DATABASE postgres WITH ALLOW_CONNECTIONS false');
    let id: number;
    try {
      expect((await admin.query('SELECT pg_terminate_backend($1, 5000) AS t', [old])).rows[0].t).toBe(true);
      id = await collect('{query}', '2 s');
      await sleep(700); // it retries meanwhile
      expect((await row(id)).status).toBe('pending');
    } finally {
      await other.query('ALTER DATABASE postgres WITH ALLOW_CONNECTIONS true');
      await other.end();
    }
    await statusOf(id, 'running', 10_000);
    expect(sidecar.attached()).toContain('query');
    const listener = await admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = 'pg-bpf-stats listener'");
    expect(listener.rows).toHaveLength(1);
    expect(listener.rows[0].pid).not.toBe(old);
    // The new listener is excluded as well, and the postmaster check did not trip.
    await sidecar.flush();
    expect((await admin.query('SELECT pid FROM bpf_stats.backend_stats WHERE pid = $1', [listener.rows[0].pid])).rows).toEqual([]);
    const listens = await admin.query(
      `SELECT s.calls FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
        WHERE s.query LIKE 'LISTEN%bpf_stats_control%'`,
    );
    expect(listens.rows).toEqual([]);
    expect(await Promise.race([sidecar.failed.then(() => 'failed'), sleep(50).then(() => 'fine')])).toBe('fine');
    // And doorbells work again.
    await statusOf(id, 'done');
    const next = await collect('{default}', '1 s');
    await statusOf(next, 'done');
  });

  it('extends overlapping requests for the same set, attaching it once', async () => {
    const first = await collect('{query}', '2 seconds');
    await statusOf(first, 'running');
    const second = await collect('{query,default}', '4 seconds');
    await statusOf(second, 'running');
    // Attached once: calls stay exact (two attachments would count each statement twice).
    expect(await callsFor('SELECT $1::int + 19, 2, 3', 12, 'SELECT $1::int + $2, $3, $4')).toEqual({ ours: 12, pgss: 12 });
    await statusOf(first, 'done');
    expect(sidecar.attached()).toContain('query'); // the second still wants it
    await statusOf(second, 'done');
    expect(sidecar.attached()).not.toContain('query');
    // A stop() of one of two overlapping requests leaves the set for the other as well.
    const a = await collect('{query}', null);
    const b = await collect('{query}', '30 s');
    await statusOf(b, 'running');
    await dba.query('SELECT bpf_stats.stop($1)', [a]);
    await statusOf(a, 'stopped');
    expect(sidecar.attached()).toContain('query');
    await dba.query('SELECT bpf_stats.stop($1)', [b]);
    await statusOf(b, 'stopped');
    expect(sidecar.attached()).not.toContain('query');
  });

  it('resumes a request a dead sidecar left running, and fails one whose end passed', async () => {
    const resumed = Number(
      (
        await admin.query(
          "INSERT INTO bpf_stats.collections (probes, duration, status, started_at) VALUES ('{query}', '3 s', 'running', now() - interval '1 s') RETURNING id",
        )
      ).rows[0].id,
    );
    const late = Number(
      (
        await admin.query(
          "INSERT INTO bpf_stats.collections (probes, duration, status, started_at) VALUES ('{query}', '2 s', 'running', now() - interval '1 hour') RETURNING id",
        )
      ).rows[0].id,
    );
    await admin.query("NOTIFY bpf_stats_control, ''");
    const failed = await statusOf(late, 'failed');
    expect(failed.error).toMatch(/no sidecar was running when this collection was due to end/);
    await sidecar.controlPlane!.settled();
    expect(sidecar.attached()).toContain('query');
    const t0 = performance.now();
    await statusOf(resumed, 'done');
    // About the remaining 2 of its 3 seconds.
    expect(performance.now() - t0).toBeGreaterThan(1200);
    expect(performance.now() - t0).toBeLessThan(2800);
    expect(sidecar.attached()).not.toContain('query');
  });

  it('marks a request still running when the sidecar shuts down as failed', async () => {
    const id = await collect('{query}', '1 minute');
    await statusOf(id, 'running');
    await sidecar.stop();
    const r = await row(id);
    expect(r.status).toBe('failed');
    expect(r.error).toMatch(/the sidecar shut down/);
    expect(sidecar.attached()).toEqual([]);
  });

  it('takes at start-up what was requested while no sidecar ran, and forgets requests finished 30 days ago', async () => {
    const pending = await collect('{query}', '1 s');
    const old = Number(
      (
        await admin.query(
          "INSERT INTO bpf_stats.collections (probes, duration, status, finished_at) VALUES ('{query}', '1 s', 'done', now() - interval '31 days') RETURNING id",
        )
      ).rows[0].id,
    );
    const recent = Number(
      (
        await admin.query(
          "INSERT INTO bpf_stats.collections (probes, duration, status, finished_at) VALUES ('{query}', '1 s', 'done', now() - interval '29 days') RETURNING id",
        )
      ).rows[0].id,
    );
    await sleep(300);
    expect((await row(pending)).status).toBe('pending');
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs: 500,
      controlPollMs: 3_600_000,
      log: (line) => logs.push(line),
    });
    await statusOf(pending, 'running');
    await statusOf(pending, 'done');
    expect(await row(old)).toBeUndefined();
    expect((await row(recent)).status).toBe('done');
    await sidecar.stop();
  });
});

describe('the least-privileged sidecar role', () => {
  it('runs as a LOGIN role in pg_monitor with CREATE on its database, bpf_stats_admin made by a DBA', async () => {
    // As a DBA would set it up (bpf_stats_admin exists cluster-wide already, made above).
    await admin.query('CREATE ROLE collector LOGIN IN ROLE pg_monitor');
    await admin.query('CREATE DATABASE least_priv');
    await admin.query('GRANT CREATE ON DATABASE least_priv TO collector');
    const dsn = (user: string) => cluster.connectionString('least_priv').replace('postgres@', `${user}@`);
    const lines: string[] = [];
    const restricted = await Sidecar.start({ connectionString: dsn('collector'), intervalMs: 500, log: (l) => lines.push(l) });
    const requester = new pg.Client(dsn('dba'));
    await requester.connect();
    const listener = new pg.Client(dsn('watcher'));
    await listener.connect();
    const seen: string[] = [];
    listener.on('notification', (n) => seen.push(n.payload!));
    await listener.query('LISTEN bpf_stats_status');
    try {
      const owner = await requester.query(
        "SELECT r.rolsuper, r.rolcreaterole FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'bpf_stats'",
      );
      expect(owner.rows).toEqual([{ rolsuper: false, rolcreaterole: false }]);
      const id = Number((await requester.query("SELECT bpf_stats.collect('{query}', '1 s') AS id")).rows[0].id);
      const deadline = Date.now() + 6000;
      while (!seen.includes(JSON.stringify({ id, status: 'done' })) && Date.now() < deadline) await sleep(50);
      expect(seen).toEqual([JSON.stringify({ id, status: 'running' }), JSON.stringify({ id, status: 'done' })]);
      await restricted.flush();
      expect(restricted.lastFlush!.error).toBeNull();
      expect(Number((await listener.query('SELECT count(*) FROM bpf_stats.backend_stats')).rows[0].count)).toBeGreaterThan(0);

      // Stopped while its listener retries against a database nobody may connect to: it stops,
      // and no listener comes back once connections are allowed again.
      const ownListener = "SELECT pid FROM pg_stat_activity WHERE application_name = 'pg-bpf-stats listener' AND datname = 'least_priv'";
      const old = (await admin.query(ownListener)).rows[0].pid;
      await admin.query('ALTER DATABASE least_priv WITH ALLOW_CONNECTIONS false');
      try {
        await admin.query('SELECT pg_terminate_backend($1, 5000)', [old]);
        await sleep(800);
        await restricted.stop();
      } finally {
        await admin.query('ALTER DATABASE least_priv WITH ALLOW_CONNECTIONS true');
      }
      await sleep(2500);
      expect((await admin.query(ownListener)).rows).toEqual([]);
    } finally {
      await restricted.stop();
      await requester.end();
      await listener.end();
    }
    expect(lines.filter((l) => /failed|cannot|control plane/.test(l))).toEqual([]);
    expect(lines.filter((l) => /lost/.test(l))).toEqual(['control listener lost its connection: reconnecting']);
  });
});
