import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * The blockers set on a commit waiting for its synchronous standby: the walsender is stopped
 * (SIGSTOP) for about a second while pg_stat_activity shows the committing backend in
 * IPC:SyncRep; once it runs again it takes the standby's acknowledgement and releases the
 * commit. Ground truth: the walsender's pid and backend type in pg_stat_replication and
 * pg_stat_activity, and how long the test kept it stopped. On Debian's 15 only: the embedded
 * 18 package ships no pg_basebackup to make its standby with.
 */
const TARGETS: Array<{ label: string; pgBin?: () => string }> = [{ label: 'PostgreSQL 15 (Debian)' }];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, probe: () => Promise<T | null | undefined>): Promise<T> {
  for (let i = 0; i < 300; i++) {
    const value = await probe();
    if (value !== null && value !== undefined) return value;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

for (const target of TARGETS) {
  describe(`a commit held by a stopped synchronous standby on ${target.label}`, () => {
    let primary: ThrowawayCluster;
    let standby: ThrowawayCluster;
    let admin: pg.Client;
    let sidecar: Sidecar;

    beforeAll(async () => {
      const pgBin = target.pgBin?.();
      primary = await ThrowawayCluster.start(pgBin ? { pgBin } : {});
      admin = new pg.Client(primary.connectionString());
      await admin.connect();
      await admin.query('CREATE EXTENSION pg_stat_statements');
      await admin.query('CREATE TABLE synced (x int)');
      standby = await primary.startStandby();
      await admin.query("ALTER SYSTEM SET synchronous_standby_names = '*'");
      await admin.query('SELECT pg_reload_conf()');
      await until(
        'the standby to be synchronous',
        async () => (await admin.query("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'")).rows[0],
      );
      sidecar = await Sidecar.start({ connectionString: primary.connectionString(), intervalMs: 3_600_000, probeSets: ['blockers'] });
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await standby?.stop();
      await primary?.stop();
    });

    it('names the walsender as the waker of IPC:SyncRep once it runs again', async () => {
      const walsender = (await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_replication')).rows[0]!.pid;
      const walsenderType = (await admin.query('SELECT backend_type FROM pg_stat_activity WHERE pid = $1', [walsender])).rows[0]
        .backend_type;
      expect(walsenderType).toBe('walsender');
      const client = new pg.Client(primary.connectionString());
      await client.connect();
      try {
        const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        process.kill(walsender, 'SIGSTOP');
        let held: number;
        const started = performance.now();
        const done = client.query('INSERT INTO synced VALUES (1)');
        try {
          await until(
            'the commit to wait',
            async () =>
              (
                await admin.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND (wait_event_type, wait_event) = ('IPC', 'SyncRep')", [
                  pid,
                ])
              ).rows[0],
          );
          await sleep(1000);
        } finally {
          process.kill(walsender, 'SIGCONT');
          held = performance.now() - started;
        }
        await done;
        await sidecar.flush();
        const { rows } = await admin.query(
          `SELECT b.waker_type, b.waker_queryid, b.waits::int, b.wait_time_ms FROM bpf_stats.query_wait_blockers b
             JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)
            WHERE s.query = 'INSERT INTO synced VALUES ($1)' AND (b.wait_event_type, b.wait_event) = ('IPC', 'SyncRep')
            ORDER BY b.wait_time_ms DESC`,
        );
        expect(rows.length, JSON.stringify(rows)).toBeGreaterThanOrEqual(1);
        // The sleep the stopped walsender held is ended by it (a physical walsender runs no statement: no key).
        expect(rows[0]).toMatchObject({ waker_type: walsenderType, waker_queryid: null });
        expect(rows[0].waits).toBeGreaterThanOrEqual(1);
        expect(rows[0].wait_time_ms / held).toBeGreaterThan(0.75);
        expect(rows[0].wait_time_ms / held).toBeLessThan(1.25);
      } finally {
        await client.end();
      }
    });
  });
}
