import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * A commit waiting for its synchronous standby: charged to IPC:SyncRep under the statement that
 * committed (pg_wait_sampling shows it under queryid 0). The standby's acknowledgements are held
 * by stopping the primary's walsender (SIGSTOP) for about a second; ground truth is how long the
 * test kept it stopped while pg_stat_activity showed the committing backend in IPC:SyncRep.
 */
let primary: ThrowawayCluster;
let standby: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, probe: () => Promise<T | null | undefined>): Promise<T> {
  for (let i = 0; i < 300; i++) {
    const value = await probe();
    if (value !== null && value !== undefined) return value;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  primary = await ThrowawayCluster.start();
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
  sidecar = await Sidecar.start({ connectionString: primary.connectionString(), intervalMs: 3_600_000 });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await standby?.stop();
  await primary?.stop();
});

describe('a commit waiting for a synchronous standby', () => {
  it('is charged to IPC:SyncRep of the committing statement, within 25% of the time the standby was held', async () => {
    const walsender = (await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_replication')).rows[0]!.pid;
    const client = new pg.Client(primary.connectionString());
    await client.connect();
    try {
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      process.kill(walsender, 'SIGSTOP');
      let held: number;
      let shown: { wait_event_type: string; wait_event: string };
      const started = performance.now();
      const done = client.query('INSERT INTO synced VALUES (1)').then(() => performance.now() - started);
      try {
        shown = await until(
          'the commit to wait',
          async () =>
            (
              await admin.query("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'IPC'", [
                pid,
              ])
            ).rows[0],
        );
        await sleep(1000);
      } finally {
        process.kill(walsender, 'SIGCONT');
        held = performance.now() - started;
      }
      const waited = await done;
      expect(shown).toEqual({ wait_event_type: 'IPC', wait_event: 'SyncRep' });
      await sidecar.flush();
      const { rows } = await admin.query(
        `SELECT w.waits::int, w.wait_time_ms FROM bpf_stats.query_wait_events w
           JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)
          WHERE s.query = 'INSERT INTO synced VALUES ($1)' AND (w.wait_event_type, w.wait_event) = ('IPC', 'SyncRep')`,
      );
      expect(rows).toHaveLength(1);
      expect(rows[0].waits).toBeGreaterThanOrEqual(1);
      expect(rows[0].wait_time_ms / held).toBeGreaterThan(0.75);
      expect(rows[0].wait_time_ms / held).toBeLessThan(1.25);
      expect(rows[0].wait_time_ms).toBeLessThanOrEqual(waited);
    } finally {
      await client.end();
    }
  });
});
