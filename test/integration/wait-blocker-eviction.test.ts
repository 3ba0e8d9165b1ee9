import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * The blockers map (query_wait_blockers) holds the active (query, wait event, waker) keys, not
 * every one ever seen: a refused key is counted in bpf_stats.health, and quiet keys are evicted
 * once written, so a full map heals. Ground truth: the statements the test ran, each sleeping once
 * in pg_sleep (pg_stat_statements counts their calls), which only a timer ends.
 */
const CAPACITY = 6;
const SLEEP_MS = 20;

let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

/** A statement of its own query id (`n` extra target columns), sleeping SLEEP_MS once. */
function statement(n: number): { text: string; normalized: string } {
  return {
    text: `SELECT pg_sleep(${SLEEP_MS / 1000})${Array.from({ length: n }, () => ', 1').join('')}`,
    normalized: `SELECT pg_sleep($1)${Array.from({ length: n }, (_, i) => `, $${i + 2}`).join('')}`,
  };
}

async function run(statements: Array<{ text: string }>): Promise<void> {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  try {
    for (const s of statements) await client.query(s.text);
  } finally {
    await client.end();
  }
}

/** Per statement: its calls in pg_stat_statements, and its PgSleep waits and time in query_wait_blockers. */
async function figures(statements: Array<{ normalized: string }>): Promise<Array<{ calls: number; waits: number; waitMs: number }>> {
  const { rows } = await admin.query(
    `SELECT s.query, s.calls::int,
            coalesce(sum(b.waits), 0)::int AS waits, coalesce(sum(b.wait_time_ms), 0) AS wait_ms
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_wait_blockers b
         ON (b.userid, b.dbid, b.toplevel, b.queryid) = (s.userid, s.dbid, s.toplevel, s.queryid)
        AND (b.wait_event_type, b.wait_event) = ('Timeout', 'PgSleep')
      WHERE s.query = ANY($1)
      GROUP BY s.query, s.calls`,
    [statements.map((s) => s.normalized)],
  );
  const byText = new Map(rows.map((r) => [r.query as string, r]));
  return statements.map((s) => {
    const r = byText.get(s.normalized);
    return { calls: r?.calls ?? 0, waits: r?.waits ?? 0, waitMs: r?.wait_ms ?? 0 };
  });
}

async function refused(): Promise<number> {
  const { rows } = await admin.query(
    `SELECT (dropped ->> 'wait_blockers_full')::int AS n FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`,
    [process.pid],
  );
  expect(rows).toHaveLength(1);
  return rows[0].n ?? 0;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    maxWaitEvents: CAPACITY,
    probeSets: ['blockers'],
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('the blockers map', () => {
  it('counts what it refuses when full, and heals', async () => {
    // Twice the map's capacity of statements, each sleeping once: some keys are refused.
    const first = Array.from({ length: 2 * CAPACITY }, (_, i) => statement(i + 1));
    await run(first);
    await sidecar.flush();
    const before = await figures(first);
    expect(before.map((f) => f.calls)).toEqual(first.map(() => 1));
    const counted = before.filter((f) => f.waits === 1).length;
    expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThanOrEqual(CAPACITY);
    expect(before.every((f) => f.waits <= 1)).toBe(true);
    // Every key left out is a refusal in health, never silent.
    expect(await refused()).toBeGreaterThanOrEqual(first.length - counted);

    // Quiet for three written flushes: their keys leave the map.
    for (let i = 0; i < 3; i++) await sidecar.flush();
    const refusedBefore = await refused();

    // New statements (fewer than the capacity) are all counted, each its own sleep's time.
    const second = Array.from({ length: CAPACITY / 2 }, (_, i) => statement(100 + i));
    await run(second);
    await sidecar.flush();
    const after = await figures(second);
    expect(after.map((f) => f.waits)).toEqual(second.map(() => 1));
    for (const f of after) expect(f.waitMs).toBeGreaterThan(SLEEP_MS * 0.9);
    expect(await refused()).toBe(refusedBefore);
  });
});
