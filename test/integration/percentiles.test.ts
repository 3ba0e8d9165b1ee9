import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { LOG2_LAYOUT, quantileUs } from '../../src/collector/histogram-layout.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';
import { packageRoot } from '../../src/package-root.js';
import { withSession } from '../support/session.js';

/*
 * Percentiles to trust: p50, p95 and p99 of bpf_stats.query_latency against the exact
 * percentiles of the same statements' latencies as PostgreSQL itself logged them
 * (log_min_duration_statement = 0: one "duration: ... ms" line per statement, measured by the
 * server from the statement's start to its end, the span query_latency observes). The
 * statements sleep for durations of a known mixed distribution over three powers of ten.
 */

let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('SET search_path = pg_catalog, pg_temp');
  await admin.query('CREATE EXTENSION pg_stat_statements SCHEMA public');
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['latency'] });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

/** A small deterministic generator (mulberry32): the same sleeps at every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Sleeps in seconds: 70% log-uniform 0.5–10 ms, 25% log-uniform 10–60 ms, 5% uniform 100–200 ms. */
function sleeps(n: number): number[] {
  const rnd = random(2026);
  const logUniform = (lo: number, hi: number) => lo * Math.exp(rnd() * Math.log(hi / lo));
  return Array.from({ length: n }, () => {
    const pick = rnd();
    const ms = pick < 0.7 ? logUniform(0.5, 10) : pick < 0.95 ? logUniform(10, 60) : 100 + 100 * rnd();
    return Math.round(ms * 1000) / 1e6;
  });
}

/** The value of rank ceil(q × n) of sorted values. */
function exactQuantile(sorted: readonly number[], q: number): number {
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

describe('query_latency percentiles', () => {
  it('are within 10% of the exact p50, p95 and p99 of the latencies PostgreSQL logged', async () => {
    const n = 600;
    const sessions = 4;
    const all = sleeps(n);
    const pids: number[] = [];
    await Promise.all(
      Array.from({ length: sessions }, (_, s) =>
        withSession(cluster.connectionString(), async (c, pid) => {
          pids.push(pid);
          await c.query('SET log_min_duration_statement = 0');
          // Literals, so the log names each statement; pg_stat_statements gives them one query id.
          for (let i = s; i < n; i += sessions) await c.query(`SELECT pg_sleep(${all[i]!.toFixed(6)})`);
        }),
      ),
    );
    await sidecar.flush();

    // Ground truth: the server's own duration of each statement, in microseconds.
    const logged = readFileSync(join(cluster.baseDir, 'server.log'), 'utf8')
      .split('\n')
      .flatMap((line) => {
        const m = / \[(\d+)\] LOG:\s+duration: ([\d.]+) ms\s+statement: SELECT pg_sleep\(/.exec(line);
        return m && pids.includes(Number(m[1])) ? [Number(m[2]) * 1000] : [];
      })
      .sort((a, b) => a - b);
    expect(logged).toHaveLength(n);

    const { rows } = await admin.query(
      `SELECT l.observations, l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms
         FROM public.pg_stat_statements s JOIN bpf_stats.query_latency l USING (userid, dbid, toplevel, queryid)
        WHERE s.query = 'SELECT pg_sleep($1)'`,
    );
    expect(rows).toHaveLength(1);
    const row = rows[0];
    // Each statement once (one may end unobserved if its backend never left the CPU after it).
    expect(Number(row.observations)).toBeGreaterThanOrEqual(n - 2);
    expect(Number(row.observations)).toBeLessThanOrEqual(n);

    const report: string[] = [];
    for (const [q, ms] of [
      [0.5, row.p50_ms],
      [0.95, row.p95_ms],
      [0.99, row.p99_ms],
    ] as const) {
      const exactMs = exactQuantile(logged, q) / 1000;
      const error = Math.abs(ms - exactMs) / exactMs;
      report.push(`p${q * 100}: ${ms.toFixed(3)} ms, exact ${exactMs.toFixed(3)} ms (${(error * 100).toFixed(2)}%)`);
      expect(error, report.at(-1)).toBeLessThan(0.1);
    }
    // The largest observation is exact: the longest logged statement, to within the few us
    // between the log's end of the statement and the backend's idle report.
    expect(Math.abs(row.max_ms - logged.at(-1)! / 1000)).toBeLessThan(1);
    console.log(`query_latency against the server log, ${n} statements: ${report.join('; ')}`);

    // The same latencies in log2 buckets miss by more: the 10% above is a check they would fail.
    const log2Counts = new Array<number>(LOG2_LAYOUT.slots).fill(0);
    for (const us of logged) log2Counts[LOG2_LAYOUT.slotOf(us)]!++;
    const log2Errors = [0.5, 0.95, 0.99].map(
      (q) => Math.abs(quantileUs(LOG2_LAYOUT, log2Counts, q, logged.at(-1)!)! - exactQuantile(logged, q)) / exactQuantile(logged, q),
    );
    expect(Math.max(...log2Errors)).toBeGreaterThan(0.1);
  });
});

describe('migration 1764600000000 (log-linear histograms)', () => {
  it('keeps the log2 rows written before it, unchanged and readable, and starts query_histograms empty', async () => {
    await admin.query('CREATE DATABASE before_log_linear');
    const client = new pg.Client(cluster.connectionString('before_log_linear'));
    await client.connect();
    try {
      await client.query('SET search_path = pg_catalog, pg_temp');
      await client.query('CREATE SCHEMA bpf_stats');
      // Every migration before this one, as a collector of the previous version left the schema.
      const migrations = readdirSync(join(packageRoot(), 'migrations'))
        .filter((f) => f.endsWith('.sql'))
        .sort();
      const logLinear = migrations.indexOf('1764600000000_log-linear-histograms.sql');
      expect(logLinear).toBeGreaterThan(0);
      await runner({
        noLock: true,
        dbClient: client,
        dir: join(packageRoot(), 'migrations'),
        direction: 'up',
        count: logLinear,
        migrationsSchema: 'bpf_stats',
        migrationsTable: 'migrations',
        checkOrder: true,
        log: () => undefined,
      });
      // A log2 row: 10 observations in [1024, 2048) us and 10 in [8192, 16384) us.
      const log2 = Array.from({ length: 32 }, (_, i) => (i === 10 || i === 13 ? 10 : 0));
      await client.query(
        `INSERT INTO bpf_stats.query_histograms (node, userid, dbid, toplevel, queryid, kind, counts, observations, max_ms, stats_since, last_seen)
         VALUES ('n1', 10, 1, true, 42, 'query_latency', $1, 20, 16, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00')`,
        [log2],
      );
      await migrateSchema(client, () => undefined, 'n1');

      expect((await client.query('SELECT count(*)::int AS n FROM bpf_stats.query_histograms')).rows[0].n).toBe(0);
      const { rows } = await client.query(
        `SELECT node, queryid, kind, counts::text AS counts, observations, max_ms, stats_since::text AS since,
                bpf_stats.hist_quantile(counts, 0.25, max_ms) AS p25, bpf_stats.hist_quantile(counts, 0.99, max_ms) AS p99
           FROM bpf_stats.query_histograms_log2`,
      );
      expect(rows).toEqual([
        {
          node: 'n1',
          queryid: '42',
          kind: 'query_latency',
          counts: `{${log2.join(',')}}`,
          observations: '20',
          max_ms: 16,
          since: '2025-01-01 00:00:00+00',
          // In log2 buckets, as before: 1024 + 1024 * 5/10 us; p99 in [8192, 16000) us, the bucket
          // the max closes: 8192 + 7808 * 0.98 us (before, 16220.16 us clamped to the max, 16 ms).
          p25: 1.536,
          p99: 15.84384,
        },
      ]);
      // New rows take the kernel's 256 buckets, and only those.
      await client.query("SELECT set_config('bpf_stats.node', 'n1', false)");
      await client.query(`INSERT INTO bpf_stats.query_histograms (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms)
                          VALUES (10, 1, true, 42, 'query_latency', array_fill(1::bigint, ARRAY[256]), 256, 1)`);
      await expect(
        client.query(`INSERT INTO bpf_stats.query_histograms (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms)
                      VALUES (10, 1, true, 43, 'query_latency', array_fill(1::bigint, ARRAY[32]), 32, 1)`),
      ).rejects.toThrow(/query_histograms_log_linear/);
    } finally {
      await client.end();
    }
  });
});
