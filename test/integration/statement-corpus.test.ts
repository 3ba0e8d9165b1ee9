import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * Every kind of statement an application or a DBA sends, from 20 concurrent sessions of four
 * login roles, with the query set on: DDL, DML, COPY, cursors (DECLARE / FETCH / CLOSE), PL/pgSQL
 * (DO, functions), EXPLAIN ANALYZE, CREATE TABLE AS, SQL PREPARE / EXECUTE / DEALLOCATE, SET ROLE,
 * the extended protocol, multi-statement query strings (with a transaction, a SET ROLE and an
 * error inside), and statements that fail (in parse analysis and in execution). Every key
 * pg_stat_statements keeps for those roles is ours with equal calls; a statement of ≥ 1 ms has at
 * least its total_exec_time.
 */
const SESSIONS = 20;
const ROUNDS = 3;
const ROLES = ['corpus_a', 'corpus_b', 'corpus_c', 'corpus_d'];

/** One round of a session: `n` names its own objects, so sessions never wait for each other's DDL. */
function corpus(n: number): Array<string | [string, unknown[]]> {
  const t = `corpus_t${n}`;
  return [
    `CREATE TABLE ${t} (id int PRIMARY KEY, v text, k int)`,
    `INSERT INTO ${t} SELECT g, md5(g::text), g % 10 FROM generate_series(1, 2000) g`,
    `CREATE INDEX ON ${t} (k)`,
    `ALTER TABLE ${t} ADD COLUMN extra int DEFAULT 0`,
    [`UPDATE ${t} SET extra = extra + $1 WHERE k = $2`, [1, 3]],
    [`SELECT v FROM ${t} WHERE id = $1`, [42]],
    [`SELECT count(*) FROM ${t} WHERE v LIKE $1`, ['a%']],
    `DELETE FROM ${t} WHERE k = 9`,
    `COPY (SELECT * FROM ${t} WHERE k < 3) TO '/dev/null'`,
    'BEGIN',
    `DECLARE corpus_cursor CURSOR FOR SELECT id, v FROM ${t} ORDER BY id`,
    'FETCH 100 FROM corpus_cursor',
    'FETCH 100 FROM corpus_cursor',
    'CLOSE corpus_cursor',
    'COMMIT',
    `DO $$ BEGIN PERFORM count(*) FROM ${t}; END $$`,
    `SELECT corpus_work(${n})`,
    `EXPLAIN (ANALYZE, COSTS OFF) SELECT k, count(*) FROM ${t} GROUP BY k`,
    `CREATE TABLE ${t}_copy AS SELECT * FROM ${t} WHERE k = 1`,
    `PREPARE corpus_by_k(int) AS SELECT count(*) FROM ${t} WHERE k = $1`,
    'EXECUTE corpus_by_k(1)',
    'EXECUTE corpus_by_k(2)',
    'DEALLOCATE corpus_by_k',
    'SET ROLE corpus_other',
    'SELECT count(*) FROM corpus_shared WHERE g % 7 = 0',
    'RESET ROLE',
    // ≥ 1 ms each, so their time is held to pg_stat_statements' too.
    'SELECT pg_sleep(0.003)',
    'SELECT count(*) FROM generate_series(1, 300000) AS burn',
    // Multi-statement query strings (one simple-protocol message): each statement is its own key.
    `SELECT count(*) FROM corpus_shared WHERE g % 3 = 0; SELECT pg_sleep(0.002); UPDATE ${t} SET extra = 2 WHERE id = 5`,
    `BEGIN; INSERT INTO ${t} VALUES (${-n - 1}, 'multi', 1); DELETE FROM ${t} WHERE id = ${-n - 1}; COMMIT`,
    'SET ROLE corpus_other; SELECT count(*) FROM corpus_shared WHERE g % 11 = 0; RESET ROLE',
    // The error ends the string: the first statement ran and counts, the third never runs.
    "SELECT count(*) FROM corpus_shared WHERE g % 13 = 0; SELECT 1 / (k - k) FROM corpus_shared_k; SELECT 'never run'",
    // Errors: no call for either (pg_stat_statements counts none), and the session goes on.
    'SELECT 1 / (k - k) FROM corpus_shared_k LIMIT 1',
    'SELEC broken',
    'BEGIN',
    `INSERT INTO ${t} VALUES (1, 'duplicate', 0)`,
    'ROLLBACK',
    `DROP TABLE ${t}_copy`,
    `DROP TABLE ${t}`,
  ];
}

for (const target of [
  { label: 'PostgreSQL 15 (Debian)' },
  { label: 'PostgreSQL 18 (@embedded-postgres)', pgBin: embeddedPostgresBin(18) },
]) {
  describe(`a corpus of statement kinds from ${SESSIONS} sessions on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let sidecar: Sidecar;
    let admin: pg.Client;

    beforeAll(async () => {
      cluster = await ThrowawayCluster.start({
        ...(target.pgBin ? { pgBin: target.pgBin } : {}),
        settings: { autovacuum: 'off', max_parallel_workers_per_gather: 0, max_connections: 60 },
      });
      admin = new pg.Client(cluster.connectionString());
      await admin.connect();
      await admin.query('CREATE EXTENSION pg_stat_statements');
      for (const role of ROLES) {
        await admin.query(`CREATE ROLE ${role} LOGIN IN ROLE pg_write_server_files`);
        await admin.query(`CREATE SCHEMA ${role} AUTHORIZATION ${role}`);
      }
      await admin.query(`CREATE ROLE corpus_other; GRANT corpus_other TO ${ROLES.join(', ')}`);
      await admin.query(`
        CREATE TABLE public.corpus_shared AS SELECT g FROM generate_series(1, 50000) g;
        CREATE TABLE public.corpus_shared_k AS SELECT 1 AS k;
        GRANT SELECT ON public.corpus_shared, public.corpus_shared_k TO PUBLIC;
        CREATE FUNCTION public.corpus_work(n int) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE c bigint;
        BEGIN
          SELECT count(*) INTO c FROM public.corpus_shared WHERE g % (n + 2) = 0;
          RETURN c;
        END $$`);
      sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 1000, probeSets: ['query'] });
      await admin.query('SELECT pg_stat_statements_reset()');
      await sidecar.flush();
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await cluster?.stop();
    });

    it('has every key pg_stat_statements keeps, with its calls', async () => {
      let errors = 0;
      await Promise.all(
        Array.from({ length: SESSIONS }, async (_, n) => {
          const role = ROLES[n % ROLES.length]!;
          const session = new pg.Client(cluster.connectionString().replace('postgres@', `${role}@`));
          await session.connect();
          try {
            for (let round = 0; round < ROUNDS; round++) {
              for (const statement of corpus(n)) {
                const [text, values] = typeof statement === 'string' ? [statement, undefined] : statement;
                await session.query(text, values).catch(() => errors++);
              }
            }
          } finally {
            await session.end();
          }
        }),
      );
      // Four failing statements a round (the error in the transaction aborts it until ROLLBACK).
      expect(errors).toBe(SESSIONS * ROUNDS * 4);
      await sidecar.flush();
      const { rows } = await admin.query<{
        rolname: string;
        query: string;
        pgss_calls: number;
        pgss_ms: number;
        calls: number | null;
        total_time_ms: number | null;
      }>(
        `SELECT r.rolname, s.query, s.calls::int AS pgss_calls, s.total_exec_time AS pgss_ms, q.calls::int AS calls, q.total_time_ms
           FROM pg_stat_statements s
           JOIN pg_roles r ON r.oid = s.userid
           LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
          WHERE r.rolname LIKE 'corpus%' AND s.toplevel AND s.calls > 0
          ORDER BY r.rolname, s.query`,
      );
      const wrong = rows.filter((r) => r.calls !== r.pgss_calls || (r.pgss_ms / r.pgss_calls >= 1 && r.total_time_ms! < r.pgss_ms * 0.98));
      const show = (list: typeof rows) =>
        list
          .map(
            (r) =>
              `${r.rolname} calls ${r.calls} (pgss ${r.pgss_calls}) ${(r.total_time_ms ?? NaN).toFixed(1)} ms (pgss ${r.pgss_ms.toFixed(1)}) ${r.query.replace(/\s+/g, ' ').slice(0, 70)}`,
          )
          .join('\n');
      console.log(`${rows.length} keys in pg_stat_statements for the corpus roles; ${rows.length - wrong.length} exact`);
      expect(rows.length).toBeGreaterThan(ROLES.length * 20);
      expect(wrong, show(wrong)).toEqual([]);
      // Refusals are for floods: none on this workload.
      const { rows: health } = await admin.query<{ dropped: Record<string, number> | null }>(
        'SELECT dropped FROM bpf_stats.health WHERE stopped_at IS NULL',
      );
      const refused = Object.entries(health[0]?.dropped ?? {}).filter(([name, n]) => /quota|full/.test(name) && Number(n) > 0);
      expect(refused).toEqual([]);
    });
  });
}
