import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { RowRetention } from '../../src/retention/row-retention.js';
import { Sidecar, type SidecarOptions } from '../../src/sidecar/sidecar.js';
import { clientDatabase } from '../../src/storage/client-database.js';

/*
 * History of the wait-event tables (query_wait_event_stats_history, backend_wait_event_stats_history),
 * tested as query_stats_history is (test/integration/health.test.ts): per-interval rows whose
 * figures are what the test made the backend do (pg_sleep's requested time, timed by the test),
 * stamped like the query history of the same flush, summing to the cumulative rows; written at
 * the history interval from periodic flushes; and gone with their key when row retention
 * deletes it. On Debian's PostgreSQL 15 (nothing here depends on the version).
 */
let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar | null = null;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function startSidecar(options: Partial<SidecarOptions> = {}): Promise<Sidecar> {
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, ...options });
  return sidecar;
}

async function session<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client(cluster.connectionString());
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The query id pg_stat_statements gives the statement it shows as `text` (constants as $n: aliases make no id of their own). */
async function queryid(text: string): Promise<string> {
  const { rows } = await admin.query('SELECT queryid::text FROM pg_stat_statements WHERE query = $1', [text]);
  expect(rows, text).toHaveLength(1);
  return rows[0].queryid;
}

/** Per key and wait event, the history's sums against the cumulative row: keys compared and keys that differ. */
async function historyAgainstCumulative(table: 'query' | 'backend'): Promise<{ keys: number; bad: number }> {
  const key =
    table === 'query'
      ? 'node, userid, dbid, toplevel, queryid, wait_event_type, wait_event'
      : 'node, pid, backend_start, wait_event_type, wait_event';
  const { rows } = await admin.query(`
    WITH h AS (SELECT ${key}, sum(waits) AS waits, sum(wait_time_ms) AS wait_time_ms, sum(runq_after_ms) AS runq_after_ms
                 FROM bpf_stats.${table}_wait_event_stats_history GROUP BY ${key})
    SELECT count(*)::int AS keys,
           count(*) FILTER (WHERE h.waits IS NULL OR h.waits <> c.waits
                               OR abs(h.wait_time_ms - c.wait_time_ms) > 1e-6 * greatest(c.wait_time_ms, 1)
                               OR abs(h.runq_after_ms - c.runq_after_ms) > 1e-6 * greatest(c.runq_after_ms, 1))::int AS bad
      FROM bpf_stats.${table}_wait_event_stats c LEFT JOIN h USING (${key})`);
  return rows[0];
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
});

afterEach(async () => {
  await sidecar?.stop();
  sidecar = null;
});

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

describe('wait-event history', () => {
  it('keeps per-interval rows of each wait event that add up to the cumulative rows, stamped with the query history', async () => {
    const s = await startSidecar();
    await s.flush();
    const chunks = [2, 3, 1];
    const flushes: Date[] = [];
    for (const n of chunks) {
      await session(async (c) => {
        for (let i = 0; i < n; i++) await c.query('SELECT pg_sleep(0.2)');
      });
      expect((await s.flush()).error).toBeNull();
      flushes.push(
        (await admin.query('SELECT last_flush_at FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL', [process.pid])).rows[0]
          .last_flush_at,
      );
    }
    const id = await queryid('SELECT pg_sleep($1)');
    const { rows } = await admin.query(
      `SELECT ts, waits::int, wait_time_ms FROM bpf_stats.query_wait_event_stats_history
        WHERE queryid = $1 AND wait_event_type = 'Timeout' AND wait_event = 'PgSleep' ORDER BY ts`,
      [id],
    );
    // One row per flush, each holding that interval's sleeps: n × 200 ms within 5% (the time asked for).
    expect(rows.map((r) => r.ts.getTime())).toEqual(flushes.map((t) => t.getTime()));
    rows.forEach((r, i) => {
      expect(r.waits).toBeGreaterThanOrEqual(chunks[i]!);
      expect(r.wait_time_ms / (chunks[i]! * 200)).toBeGreaterThan(0.95);
      expect(r.wait_time_ms / (chunks[i]! * 200)).toBeLessThan(1.05);
    });
    // Written by the same statement as the key's query history.
    const { rows: queryHistory } = await admin.query('SELECT ts FROM bpf_stats.query_stats_history WHERE queryid = $1 ORDER BY ts', [id]);
    expect(queryHistory.map((r) => r.ts.getTime())).toEqual(flushes.map((t) => t.getTime()));
    // Every key and event of both tables: history sums to the cumulative row.
    for (const table of ['query', 'backend'] as const) {
      const { keys, bad } = await historyAgainstCumulative(table);
      expect(keys, table).toBeGreaterThan(0);
      expect(bad, table).toBe(0);
    }
  });

  it('writes history at its own granularity from periodic flushes, summing to the time slept', async () => {
    const s = await startSidecar({ intervalMs: 200, historyIntervalMs: 1500 });
    await s.flush();
    let n = 0;
    await session(async (c) => {
      const until = performance.now() + 3500;
      while (performance.now() < until) {
        await c.query('SELECT pg_sleep(0.05) IS NULL');
        n++;
      }
    });
    await sleep(500);
    expect((await s.flush()).error).toBeNull();
    const id = await queryid('SELECT pg_sleep($1) IS NULL');
    const { rows } = await admin.query(
      `SELECT ts, waits, wait_time_ms FROM bpf_stats.query_wait_event_stats_history
        WHERE queryid = $1 AND wait_event_type = 'Timeout' AND wait_event = 'PgSleep' ORDER BY ts`,
      [id],
    );
    const slept = rows.reduce((sum, r) => sum + r.wait_time_ms, 0);
    expect(slept / (n * 50)).toBeGreaterThan(0.95);
    expect(slept / (n * 50)).toBeLessThan(1.05);
    // ~4 s of periodic flushes every 200 ms, history every 1.5 s: 2 or 3 periodic rows and the explicit one.
    expect(rows.length).toBeGreaterThanOrEqual(2);
    expect(rows.length).toBeLessThanOrEqual(4);
    const periodic = rows.slice(0, -1).map((r) => r.ts.getTime());
    for (let i = 1; i < periodic.length; i++) expect(periodic[i]! - periodic[i - 1]!).toBeGreaterThanOrEqual(1300);
    for (const table of ['query', 'backend'] as const) expect((await historyAgainstCumulative(table)).bad, table).toBe(0);
  });

  it('loses a query key’s wait history with the key when row retention deletes it, and no other key’s', async () => {
    const s = await startSidecar();
    await session((c) => c.query('SELECT pg_sleep(0.1)::text'));
    await session((c) => c.query('SELECT pg_sleep(0.1) IS NOT NULL'));
    expect((await s.flush()).error).toBeNull();
    const doomed = await queryid('SELECT pg_sleep($1)::text');
    const kept = await queryid('SELECT pg_sleep($1) IS NOT NULL');
    const counts = async (id: string) =>
      (
        await admin.query(
          `SELECT (SELECT count(*) FROM bpf_stats.query_stats WHERE queryid = $1)::int AS stats,
                  (SELECT count(*) FROM bpf_stats.query_wait_event_stats WHERE queryid = $1)::int AS events,
                  (SELECT count(*) FROM bpf_stats.query_wait_event_stats_history WHERE queryid = $1)::int AS history`,
          [id],
        )
      ).rows[0];
    expect(await counts(doomed)).toMatchObject({ stats: 1, events: expect.any(Number), history: expect.any(Number) });
    expect((await counts(doomed)).history).toBeGreaterThan(0);
    await s.stop();
    sidecar = null;
    // As if pg_stat_statements had deallocated the doomed key and still held every other one.
    await sleep(1200);
    const { rows: held } = await admin.query('SELECT userid, dbid, toplevel, queryid::text FROM pg_stat_statements WHERE queryid <> $1', [
      doomed,
    ]);
    const node = (await admin.query('SELECT node FROM bpf_stats.query_stats WHERE queryid = $1', [doomed])).rows[0].node;
    const db = new pg.Client(cluster.connectionString());
    await db.connect();
    try {
      await db.query("SELECT set_config('search_path', 'pg_catalog, pg_temp', false), set_config('bpf_stats.node', $1, false)", [node]);
      const retention = new RowRetention(1000, 1000, {
        heldKeys: async () => ({
          max: 5000,
          pgss: {
            userid: held.map((r) => Number(r.userid)),
            dbid: held.map((r) => Number(r.dbid)),
            toplevel: held.map((r) => r.toplevel),
            queryid: held.map((r) => r.queryid),
          },
          running: { userid: [], dbid: [], queryid: [] },
        }),
      });
      const { queries } = await retention.maintain(clientDatabase(db));
      expect(queries).toBeGreaterThanOrEqual(1);
    } finally {
      await db.end();
    }
    expect(await counts(doomed)).toEqual({ stats: 0, events: 0, history: 0 });
    const left = await counts(kept);
    expect(left.stats).toBe(1);
    expect(left.events).toBeGreaterThan(0);
    expect(left.history).toBeGreaterThan(0);
  });
});
