import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * A burst of distinct statements from one role, scaled down: pg_stat_statements.max = 100 (its
 * least), 1,000 statements. bpf_stats keeps every key pg_stat_statements holds, and of the keys it
 * no longer holds at most M/4 = 25 per role and M/2 = 50 in all, with their texts, history and
 * latency histogram history rows (probe set latency); the default 7-day retention does not
 * matter for that. Another role's statements, which pg_stat_statements holds, all stay; so do a
 * third role's few statements run once, which the flood pushes out of pg_stat_statements: the
 * bound per node counts what each role's bound keeps, so one role's flood does not delete
 * another role's figures.
 */
const PGSS_MAX = 100;
const FLOOD = 1000;

let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar | undefined;

async function as(role: string, statements: string[]): Promise<void> {
  const client = new pg.Client(cluster.connectionString().replace('postgres@', `${role}@`));
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

/** Query keys of `role` in bpf_stats.query_stats, and how many of them the server's pg_stat_statements holds. */
async function keysOf(role: string): Promise<{ rows: number; held: number }> {
  const { rows } = await admin.query<{ rows: number; held: number }>(
    `SELECT count(*)::int AS rows, count(s.queryid)::int AS held
       FROM bpf_stats.query_stats q
       LEFT JOIN (SELECT DISTINCT userid, dbid, toplevel, queryid FROM pg_stat_statements) s USING (userid, dbid, toplevel, queryid)
      WHERE q.userid = $1::regrole`,
    [role],
  );
  return rows[0]!;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ settings: { 'pg_stat_statements.max': PGSS_MAX } });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE ROLE flooder LOGIN; CREATE ROLE app LOGIN; CREATE ROLE quiet LOGIN');
}, 120_000);

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('disk bpf_stats takes', () => {
  it('is bounded per role and in all after a burst of distinct statements, never losing a key pg_stat_statements holds', async () => {
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      probeSets: ['latency'],
      intervalMs: 3_600_000,
      historyIntervalMs: 0,
    });
    // An application's statements, each run often enough that pg_stat_statements keeps them.
    const app = Array.from(
      { length: 20 },
      (_, i) => `SELECT ${Array.from({ length: i + 1 }, (_, j) => `${j}`).join(', ')} FROM pg_class LIMIT 1`,
    );
    for (let round = 0; round < 10; round++) await as('app', app);
    expect((await sidecar.flush()).error).toBeNull();
    const appBefore = await admin.query<{ key: string }>(
      "SELECT userid || '/' || dbid || '/' || toplevel || '/' || queryid AS key FROM bpf_stats.query_stats WHERE userid = 'app'::regrole ORDER BY 1",
    );
    expect(appBefore.rows.length).toBeGreaterThanOrEqual(20);
    // A quiet role's statements, each once: the flood will push them out of pg_stat_statements.
    const quietKeys = async () =>
      (
        await admin.query<{ key: string }>(
          "SELECT userid || '/' || dbid || '/' || toplevel || '/' || queryid AS key FROM bpf_stats.query_stats WHERE userid = 'quiet'::regrole ORDER BY 1",
        )
      ).rows.map((r) => r.key);
    await as(
      'quiet',
      Array.from({ length: 5 }, (_, i) => `SELECT ${Array.from({ length: i + 1 }, (_, j) => `${j}`).join(', ')} FROM pg_namespace LIMIT 1`),
    );
    expect((await sidecar.flush()).error).toBeNull();
    const quietBefore = await quietKeys();
    expect(quietBefore).toHaveLength(5);

    // The burst: distinct query ids from one role, each once.
    await as(
      'flooder',
      Array.from({ length: FLOOD }, (_, n) => `SELECT 1${'+1'.repeat(n)}`),
    );
    expect((await sidecar.flush()).error).toBeNull();
    const burst = await keysOf('flooder');
    // Written first (what bpf_stats kept for 7 days before): far more than pg_stat_statements holds.
    expect(burst.rows).toBeGreaterThan(FLOOD / 2);
    expect(burst.held).toBeLessThanOrEqual(PGSS_MAX);
    const floodHistograms = async () =>
      (
        await admin.query<{ n: number }>(
          "SELECT count(DISTINCT queryid)::int AS n FROM bpf_stats.query_histogram_history WHERE userid = 'flooder'::regrole AND kind = 'query_latency'",
        )
      ).rows[0]!.n;
    // Each flood statement's latency went into the histogram history too.
    expect(await floodHistograms()).toBeGreaterThan(FLOOD / 2);

    // The burst of new keys brings the next pass forward: the next flush bounds them.
    const deallocs = async () =>
      Number((await admin.query<{ n: string }>('SELECT dealloc::text AS n FROM pg_stat_statements_info')).rows[0]!.n);
    const deallocsBefore = await deallocs();
    expect((await sidecar.flush()).error).toBeNull();
    const after = await keysOf('flooder');
    const { rows: unheld } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM bpf_stats.query_stats q
        WHERE NOT EXISTS (SELECT 1 FROM pg_stat_statements s WHERE (s.userid, s.dbid, s.toplevel, s.queryid) = (q.userid, q.dbid, q.toplevel, q.queryid))`,
    );
    // Held is judged by pg_stat_statements now, the pass by what it held during the flush: each
    // deallocation since (the flush's and these statements' own new entries, a full
    // pg_stat_statements evicting its least-used) turned at least 10 once-called flood keys
    // (pg_stat_statements' minimum a deallocation) from held to unheld after the pass.
    const lateUnheld = 10 * ((await deallocs()) - deallocsBefore);
    console.log(
      `flooder after the pass: ${after.rows} rows, ${after.held} held; unheld in all ${unheld[0]!.n}; deallocations since the pass began ${lateUnheld / 10}`,
    );
    expect(after.rows - after.held).toBeLessThanOrEqual(PGSS_MAX / 4 + lateUnheld);
    expect(after.rows).toBeLessThanOrEqual(PGSS_MAX + PGSS_MAX / 4);
    expect(unheld[0]!.n).toBeLessThanOrEqual(PGSS_MAX / 2 + lateUnheld);
    // Every key pg_stat_statements holds that bpf_stats had is still there: the application's all.
    const appAfter = await admin.query<{ key: string }>(
      "SELECT userid || '/' || dbid || '/' || toplevel || '/' || queryid AS key FROM bpf_stats.query_stats WHERE userid = 'app'::regrole ORDER BY 1",
    );
    const { rows: heldApp } = await admin.query<{ key: string }>(
      "SELECT userid || '/' || dbid || '/' || toplevel || '/' || queryid AS key FROM pg_stat_statements WHERE userid = 'app'::regrole",
    );
    for (const { key } of heldApp) if (appBefore.rows.some((r) => r.key === key)) expect(appAfter.rows.map((r) => r.key)).toContain(key);
    expect(heldApp.length).toBeGreaterThanOrEqual(20);
    // The quiet role's keys are no longer held (the flood deallocated them), and yet all stay.
    const { rows: quietHeld } = await admin.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_statements WHERE userid = 'quiet'::regrole",
    );
    expect(quietHeld[0]!.n).toBe(0);
    expect(await quietKeys()).toEqual(quietBefore);
    // A key's text and history rows went with it.
    const { rows: orphans } = await admin.query<{ texts: number; history: number; histograms: number }>(
      `SELECT (SELECT count(*)::int FROM bpf_stats.query_texts t WHERE NOT EXISTS (
                 SELECT 1 FROM bpf_stats.query_stats q WHERE (q.node, q.userid, q.dbid, q.toplevel, q.queryid) = (t.node, t.userid, t.dbid, t.toplevel, t.queryid))) AS texts,
              (SELECT count(*)::int FROM bpf_stats.query_stats_history h WHERE h.userid = 'flooder'::regrole AND NOT EXISTS (
                 SELECT 1 FROM bpf_stats.query_stats q WHERE (q.node, q.userid, q.dbid, q.toplevel, q.queryid) = (h.node, h.userid, h.dbid, h.toplevel, h.queryid))) AS history,
              (SELECT count(*)::int FROM bpf_stats.query_histogram_history h WHERE h.userid = 'flooder'::regrole AND NOT EXISTS (
                 SELECT 1 FROM bpf_stats.query_stats q WHERE (q.node, q.userid, q.dbid, q.toplevel, q.queryid) = (h.node, h.userid, h.dbid, h.toplevel, h.queryid))) AS histograms`,
    );
    expect(orphans).toEqual([{ texts: 0, history: 0, histograms: 0 }]);
    expect(await floodHistograms()).toBeLessThanOrEqual(after.rows);
    const { rows: size } = await admin.query<{ rows: number; bytes: string }>(
      `SELECT (SELECT count(*)::int FROM bpf_stats.query_stats) AS rows,
              pg_total_relation_size('bpf_stats.query_stats') + pg_total_relation_size('bpf_stats.query_texts') AS bytes`,
    );
    console.log(
      `disk-bound: flooder ${burst.rows} keys after the burst, ${after.rows} after the pass (${after.held} held by pg_stat_statements); query_stats ${size[0]!.rows} rows, ${(Number(size[0]!.bytes) / 1024).toFixed(0)} kB with texts`,
    );
  }, 120_000);
});
