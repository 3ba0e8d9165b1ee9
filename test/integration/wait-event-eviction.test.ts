import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * The wait-event maps hold the active (query, event) and (process, event) pairs, not every one
 * ever seen: a refused key is counted in bpf_stats.health (its sleep still counts in its query's
 * wait columns), and quiet keys are evicted once written, so a full map heals. Ground truth: the
 * statements the test ran, each sleeping once in pg_sleep for a known time (pg_stat_statements
 * counts their calls).
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

/** Per statement: its PgSleep waits and time in query_wait_events, and other_wait_ms in query_stats. */
async function figures(
  statements: Array<{ normalized: string }>,
): Promise<Array<{ calls: number; waits: number; waitMs: number; otherWaitMs: number }>> {
  const { rows } = await admin.query(
    `SELECT s.query, s.calls::int, q.other_wait_ms,
            coalesce((SELECT sum(w.waits) FROM bpf_stats.query_wait_events w
                       WHERE (w.userid, w.dbid, w.toplevel, w.queryid) = (s.userid, s.dbid, s.toplevel, s.queryid)
                         AND (w.wait_event_type, w.wait_event) = ('Timeout', 'PgSleep')), 0)::int AS waits,
            coalesce((SELECT sum(w.wait_time_ms) FROM bpf_stats.query_wait_events w
                       WHERE (w.userid, w.dbid, w.toplevel, w.queryid) = (s.userid, s.dbid, s.toplevel, s.queryid)
                         AND (w.wait_event_type, w.wait_event) = ('Timeout', 'PgSleep')), 0) AS wait_ms
       FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
      WHERE s.query = ANY($1)`,
    [statements.map((s) => s.normalized)],
  );
  const byText = new Map(rows.map((r) => [r.query as string, r]));
  return statements.map((s) => {
    const r = byText.get(s.normalized);
    return { calls: r?.calls ?? 0, waits: r?.waits ?? 0, waitMs: r?.wait_ms ?? 0, otherWaitMs: r?.other_wait_ms ?? 0 };
  });
}

async function refused(counter: string): Promise<number> {
  const { rows } = await admin.query(`SELECT (dropped ->> $2)::int AS n FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`, [
    process.pid,
    counter,
  ]);
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
    waitSlots: 0,
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('the wait-event maps', () => {
  it('count what they refuse when full, keep the sleep in the wait columns, and heal', async () => {
    // Twice the map's capacity of statements, each sleeping once: some keys are refused.
    const first = Array.from({ length: 2 * CAPACITY }, (_, i) => statement(i + 1));
    await run(first);
    // And more processes sleeping than the per-process map holds: each is a key (pid, PgSleep)
    // (waitSlots 0: no record counts an event itself).
    for (let i = 0; i < CAPACITY + 2; i++) await run([statement(1)]);
    await sidecar.flush();
    const before = await figures(first);
    expect(before.map((f) => f.calls)).toEqual(first.map((_, i) => (i === 0 ? CAPACITY + 3 : 1)));
    const counted = before.filter((f, i) => f.waits === (i === 0 ? CAPACITY + 3 : 1)).length;
    expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThanOrEqual(CAPACITY);
    // Every refusal is in health; every sleep is in its statement's wait columns all the same.
    expect(await refused('wait_events_full')).toBeGreaterThanOrEqual(before.filter((f) => f.waits === 0).length);
    expect(before.filter((f) => f.waits === 0).length).toBeGreaterThanOrEqual(first.length - CAPACITY);
    for (const f of before) expect(f.otherWaitMs).toBeGreaterThan(SLEEP_MS * 0.9);
    // The per-process map is full too: at least two of the processes' keys were refused, counted.
    expect(await refused('backend_wait_events_full')).toBeGreaterThanOrEqual(2);

    // Quiet for three written flushes: their keys leave the map.
    for (let i = 0; i < 3; i++) await sidecar.flush();
    const refusedBefore = await refused('wait_events_full');

    // New statements (fewer than the capacity) are all counted, each its own sleep's time.
    const second = Array.from({ length: CAPACITY / 2 }, (_, i) => statement(100 + i));
    await run(second);
    await sidecar.flush();
    const after = await figures(second);
    expect(after.map((f) => f.waits)).toEqual(second.map(() => 1));
    for (const f of after) expect(f.waitMs).toBeGreaterThan(SLEEP_MS * 0.9);
    expect(await refused('wait_events_full')).toBe(refusedBefore);
  });
});
