import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * The lock-wait maps hold the active (query, lock) pairs, not every one ever seen: quiet entries
 * are evicted once written (src/deltas/evictable-deltas.ts), so a map filled by statements that
 * no longer wait heals, and eviction loses no wait. Ground truth: how many times the test made
 * each statement wait on a row lock another transaction held.
 */
const CAPACITY = 4;
const HOLD_MS = 30;

let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** An UPDATE of its own query id (`n` terms), as pg_stat_statements normalizes it and as it is run. */
function statement(n: number): { text: string; normalized: string } {
  return {
    text: `UPDATE accounts SET balance = balance${' + 1'.repeat(n)} WHERE id = 1`,
    normalized: `UPDATE accounts SET balance = balance${Array.from({ length: n }, (_, i) => ` + $${i + 1}`).join('')} WHERE id = $${n + 1}`,
  };
}

async function connect(): Promise<pg.Client> {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  return client;
}

/** Runs `sql` once while another transaction holds the row it updates: one lock wait. */
async function waitOnce(sql: string): Promise<void> {
  const holder = await connect();
  const waiter = await connect();
  try {
    await holder.query('BEGIN');
    await holder.query('UPDATE accounts SET balance = balance WHERE id = 1');
    const pid = (await waiter.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const done = waiter.query(sql);
    for (let i = 0; ; i++) {
      const { rows } = await admin.query('SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted', [pid]);
      if (rows.length) break;
      if (i > 500) throw new Error(`backend ${pid} never waited`);
      await sleep(5);
    }
    await sleep(HOLD_MS);
    await holder.query('COMMIT');
    await done;
  } finally {
    await holder.end();
    await waiter.end();
  }
}

/** The waits query_lock_waits has for each statement (0 when it has no row). */
async function waits(statements: Array<{ normalized: string }>): Promise<number[]> {
  const { rows } = await admin.query(
    `SELECT s.query, coalesce(sum(w.waits), 0)::int AS waits
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_lock_waits w USING (userid, dbid, toplevel, queryid)
      WHERE s.query = ANY($1) GROUP BY s.query`,
    [statements.map((s) => s.normalized)],
  );
  const byText = new Map(rows.map((r) => [r.query as string, r.waits as number]));
  return statements.map((s) => byText.get(s.normalized) ?? 0);
}

async function refused(): Promise<number> {
  const { rows } = await admin.query(
    `SELECT (dropped ->> 'lock_waits_full')::int AS n FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`,
    [process.pid],
  );
  expect(rows).toHaveLength(1);
  return rows[0].n ?? 0;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = await connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE TABLE accounts (id int PRIMARY KEY, balance bigint)');
  await admin.query('INSERT INTO accounts VALUES (1, 0)');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    probeSets: ['locks'],
    maxLockWaits: CAPACITY,
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('the lock-wait maps', () => {
  it('heal once full: quiet entries leave, new statements are counted, and no wait is lost', async () => {
    // Twice the map's capacity of statements, each made to wait once: half are refused.
    const first = Array.from({ length: 2 * CAPACITY }, (_, i) => statement(i + 1));
    for (const s of first) await waitOnce(s.text);
    await sidecar.flush();
    const counted = await waits(first);
    expect(counted.filter((n) => n === 1)).toHaveLength(CAPACITY);
    expect(counted.filter((n) => n === 0)).toHaveLength(CAPACITY);
    const refusedWhenFull = await refused();
    expect(refusedWhenFull).toBe(CAPACITY);

    // Quiet for three written flushes: the entries leave the map.
    for (let i = 0; i < 3; i++) await sidecar.flush();

    // New statements are all counted, and a statement evicted that waits again adds to its row.
    const second = Array.from({ length: CAPACITY - 1 }, (_, i) => statement(100 + i));
    const back = first[counted.indexOf(1)]!;
    for (const s of [...second, back]) await waitOnce(s.text);
    await sidecar.flush();
    expect(await refused()).toBe(refusedWhenFull);
    expect(await waits(second)).toEqual(second.map(() => 1));
    expect(await waits([back])).toEqual([2]);
  });
});
