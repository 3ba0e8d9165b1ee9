import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { statementOfTerms } from '../support/run-statements.js';

/*
 * The tables a flush rewrites in place (query_stats, backend_stats, query_histograms) keep room
 * in each page (fillfactor 50, migrations/1764100000000_hot-updates.sql and
 * 1764300000000_histogram-lock-hot-updates.sql), so that a row's new version stays on its page:
 * a HOT update, no new index entry, the old version pruned in place. Ground truth: the server's
 * own counts of updates and HOT updates (pg_stat_user_tables).
 */
let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

const TABLES = ['query_stats', 'backend_stats', 'query_histograms'];

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['latency'] });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('rows rewritten by every flush', () => {
  it('are updated in place (HOT): statements, backends and histograms', async () => {
    const statements = Array.from({ length: 100 }, (_, i) => statementOfTerms(i + 1, '-'));
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    try {
      for (let round = 0; round < 6; round++) {
        for (const sql of statements) await client.query(sql);
        await sidecar.flush();
      }
    } finally {
      await client.end();
    }
    // The writer's counts reach pg_stat_user_tables at the latest when its backend exits.
    await sidecar.stop();
    const counts = async () => {
      await admin.query('SELECT pg_stat_clear_snapshot()');
      const { rows } = await admin.query(
        `SELECT relname, n_tup_upd::int AS updates, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables
          WHERE schemaname = 'bpf_stats' AND relname = ANY($1) ORDER BY relname`,
        [TABLES],
      );
      return rows as Array<{ relname: string; updates: number; hot: number }>;
    };
    await expect
      .poll(async () => (await counts()).find((r) => r.relname === 'query_histograms')?.updates ?? 0, { timeout: 10_000 })
      .toBeGreaterThanOrEqual(5 * 100);
    const rows = await counts();
    console.log(`HOT updates: ${rows.map((r) => `${r.relname} ${r.hot} of ${r.updates}`).join(', ')}`);
    expect(rows.map((r) => r.relname)).toEqual([...TABLES].sort());
    const byName = new Map(rows.map((r) => [r.relname, r]));
    for (const name of ['query_stats', 'query_histograms']) {
      const r = byName.get(name)!;
      expect(r.hot / r.updates, `${name}: ${r.hot} of ${r.updates} updates HOT`).toBeGreaterThan(0.95);
    }
    // A backend's last update sets exited_at, which the index of live backends depends on: that
    // one cannot be HOT. Every other update of a backend row is.
    const backends = byName.get('backend_stats')!;
    const exited = Number((await admin.query('SELECT count(*) AS n FROM bpf_stats.backend_stats WHERE exited_at IS NOT NULL')).rows[0].n);
    expect(backends.updates).toBeGreaterThan(exited);
    expect(
      backends.updates - backends.hot,
      `backend_stats: ${backends.hot} of ${backends.updates} updates HOT, ${exited} rows closed`,
    ).toBeLessThanOrEqual(exited);
  });
});
