import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { LOG2_LAYOUT, quantileUs } from '../../src/collector/histogram-layout.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
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
    for (const [q, ms] of [[0.5, row.p50_ms], [0.95, row.p95_ms], [0.99, row.p99_ms]] as const) {
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
    const log2Errors = [0.5, 0.95, 0.99].map((q) => Math.abs(quantileUs(LOG2_LAYOUT, log2Counts, q, logged.at(-1)!)! - exactQuantile(logged, q)) / exactQuantile(logged, q));
    expect(Math.max(...log2Errors)).toBeGreaterThan(0.1);
  });
});
