import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

const run = promisify(execFile);

/*
 * Workloads we did not write, against pg_stat_statements: pgbench's built-in scripts
 * (tpcb-like, simple-update, select-only) in all three protocols (simple, extended, prepared),
 * and sysbench's OLTP scripts (Debian's sysbench, its pgsql driver: oltp_read_write, which
 * runs point selects, ranges, sums, ORDER BY, DISTINCT, updates, deletes and inserts in
 * transactions; and oltp_point_select). With the query set on, every key pg_stat_statements
 * keeps for the workload's role is in bpf_stats.query_stats with equal calls, and a statement
 * that took at least 1 ms on average has at least pg_stat_statements' execution time (ours
 * also holds parse, plan and lock waits before the executor).
 */
interface KeyRow {
  query: string;
  pgss_calls: number;
  pgss_ms: number;
  calls: number | null;
  total_time_ms: number | null;
}

describe('workloads written elsewhere, every key against pg_stat_statements', () => {
  let cluster: ThrowawayCluster;
  let sidecar: Sidecar;
  let admin: pg.Client;
  const workloadDsn = (database = 'postgres') => cluster.connectionString(database).replace('postgres@', 'workload@');

  async function reset(): Promise<void> {
    await admin.query('SELECT pg_stat_statements_reset()');
    await sidecar.flush();
    await admin.query(
      'DROP TABLE IF EXISTS calls_before; CREATE TEMP TABLE calls_before AS SELECT userid, dbid, toplevel, queryid, calls, total_time_ms FROM bpf_stats.query_stats',
    );
  }

  /** pg_stat_statements' keys of the workload role, next to what we counted under each since reset(). */
  async function keys(): Promise<KeyRow[]> {
    await sidecar.flush();
    const { rows } = await admin.query<KeyRow>(
      `SELECT s.query, s.calls::int AS pgss_calls, s.total_exec_time AS pgss_ms,
              (q.calls - coalesce(b.calls, 0))::int AS calls, q.total_time_ms - coalesce(b.total_time_ms, 0) AS total_time_ms
         FROM pg_stat_statements s
         LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
         LEFT JOIN calls_before b USING (userid, dbid, toplevel, queryid)
        WHERE s.userid = 'workload'::regrole AND s.calls > 0 AND s.toplevel
        ORDER BY s.calls DESC, s.query`,
    );
    return rows;
  }

  function expectExact(rows: KeyRow[], label: string): void {
    const table = rows
      .map(
        (r) =>
          `${String(r.calls).padStart(6)} (pgss ${String(r.pgss_calls).padStart(6)}) ${(r.total_time_ms ?? NaN).toFixed(1).padStart(9)} ms (pgss ${r.pgss_ms.toFixed(1).padStart(9)})  ${r.query.replace(/\s+/g, ' ').slice(0, 70)}`,
      )
      .join('\n');
    console.log(`${label}: ${rows.length} statements\n${table}`);
    expect(rows.length, label).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.calls, `${label}: ${r.query}\n${table}`).toBe(r.pgss_calls);
      // 2% for the clocks: pgss times the executor with its own clock, we add the scheduler's slices.
      if (r.pgss_ms / r.pgss_calls >= 1)
        expect(r.total_time_ms!, `${label}: ${r.query}\n${table}`).toBeGreaterThanOrEqual(r.pgss_ms * 0.98);
    }
  }

  beforeAll(async () => {
    cluster = await ThrowawayCluster.start({ settings: { autovacuum: 'off', max_parallel_workers_per_gather: 0 } });
    admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    await admin.query('CREATE ROLE workload LOGIN');
    await admin.query('CREATE DATABASE workload OWNER workload');
    await cluster.exec('pgbench', ['-i', '-q', '-s', '2', workloadDsn('workload')]);
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['query'] });
  });

  afterAll(async () => {
    await sidecar?.stop();
    await admin?.end();
    await cluster?.stop();
  });

  for (const protocol of ['simple', 'extended', 'prepared']) {
    it(`pgbench's built-in scripts, ${protocol} protocol`, async () => {
      await reset();
      const db = workloadDsn('workload');
      for (const script of ['tpcb-like', 'simple-update', 'select-only']) {
        await cluster.exec('pgbench', ['-n', '-M', protocol, '-b', script, '-c', '4', '-j', '2', '-t', '150', db]);
      }
      expectExact(await keys(), `pgbench -M ${protocol}`);
    });
  }

  it("sysbench's OLTP scripts (pgsql driver)", async () => {
    await reset();
    const common = [
      '--db-driver=pgsql',
      `--pgsql-host=${cluster.baseDir}`,
      `--pgsql-port=${cluster.port}`,
      '--pgsql-user=workload',
      '--pgsql-db=workload',
      '--tables=2',
      '--table-size=2000',
    ];
    await run('sysbench', [...common, 'oltp_read_write', 'prepare'], { timeout: 120_000 });
    await reset();
    for (const script of ['oltp_read_write', 'oltp_point_select']) {
      await run('sysbench', [...common, '--threads=4', '--events=400', '--time=0', script, 'run'], { timeout: 120_000 });
    }
    expectExact(await keys(), 'sysbench');
  });
});
