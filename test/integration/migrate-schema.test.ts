import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { UserError } from '../../src/errors.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';
import { queryIncrementsAttributes } from '../../src/storage/metric-schema.js';

/*
 * migrations/ and sql/ (views, functions, grants, comments) are applied again only when they
 * may differ from what the schema holds. A view that CREATE OR REPLACE rewrote has a new row version in
 * pg_rewrite: its xmin says whether a migrateSchema applied sql/.
 */
let cluster: ThrowawayCluster;
let client: pg.Client;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  client = new pg.Client(cluster.connectionString());
  await client.connect();
  await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
});

afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

/** The transaction that last wrote bpf_stats.activity's rule (CREATE OR REPLACE VIEW writes it). */
async function viewWrittenBy(): Promise<string> {
  const { rows } = await client.query<{ xmin: string }>(
    "SELECT xmin::text FROM pg_rewrite WHERE ev_class = 'bpf_stats.activity'::regclass",
  );
  return rows[0]!.xmin;
}

async function schemaComment(): Promise<string> {
  const { rows } = await client.query<{ comment: string }>("SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment");
  return rows[0]!.comment;
}

describe('migrateSchema', () => {
  it('applies migrations/ and sql/ again only when what they would write differs, or when asked to', async () => {
    await migrateSchema(client);
    const first = await viewWrittenBy();
    expect(await schemaComment()).toMatch(/^pg-bpf-stats: .* Definitions applied: [0-9a-f]{16}$/);

    // A restart of the same version: nothing to apply, and node-pg-migrate is not even asked
    // (it says "No migrations to run!" whenever it runs).
    const said: string[] = [];
    await migrateSchema(client, (line) => said.push(line));
    expect(await viewWrittenBy()).toBe(first);
    expect(said).toEqual([]);

    // An older version's start rewrites the schema's comment with its own sql/, without the mark.
    await client.query("COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'");
    await migrateSchema(client);
    const second = await viewWrittenBy();
    expect(second).not.toBe(first);
    expect(await schemaComment()).toMatch(/ Definitions applied: [0-9a-f]{16}$/);

    // pg-bpf-stats migrate applies everything, whatever the mark says.
    await migrateSchema(client, (line) => said.push(line), undefined, { reapply: true });
    expect(await viewWrittenBy()).not.toBe(second);
    expect(said).toContain('No migrations to run!');
  });

  it('applies sql/ again for another role (it owns and grants what it creates)', async () => {
    await migrateSchema(client);
    const before = await viewWrittenBy();
    await client.query('CREATE ROLE collector_two SUPERUSER');
    try {
      await client.query('SET ROLE collector_two');
      await migrateSchema(client);
      expect(await viewWrittenBy()).not.toBe(before);
    } finally {
      await client.query('RESET ROLE');
    }
  });

  it("re-creates the views when an installed one has columns CREATE OR REPLACE cannot change, keeping a DBA's grants", async () => {
    await migrateSchema(client);
    const { rows: wanted } = await client.query<{ attname: string }>(
      "SELECT attname FROM pg_attribute WHERE attrelid = 'bpf_stats.query_time'::regclass AND attnum > 0 ORDER BY attnum",
    );
    // As an older version left it: a column where the head has another (query_locks depends on
    // query_lock_detail, so views depend on each other too).
    await client.query(`DROP VIEW bpf_stats.query_time;
      CREATE VIEW bpf_stats.query_time AS SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, q.calls AS older_column FROM bpf_stats.query_stats q;
      CREATE ROLE dashboard_reader NOLOGIN;
      GRANT SELECT ON bpf_stats.query_time, bpf_stats.query_locks TO dashboard_reader;
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    const said: string[] = [];
    await migrateSchema(client, (line) => said.push(line));
    expect(said.join('\n')).toMatch(/re-creating the bpf_stats views: cannot change name of view column "older_column"/);
    const { rows: columns } = await client.query<{ attname: string }>(
      "SELECT attname FROM pg_attribute WHERE attrelid = 'bpf_stats.query_time'::regclass AND attnum > 0 ORDER BY attnum",
    );
    expect(columns).toEqual(wanted);
    const { rows: grants } = await client.query<{ view: string; reader: boolean; monitor: boolean; public: boolean }>(
      `SELECT v AS view, has_table_privilege('dashboard_reader', 'bpf_stats.' || v, 'SELECT') AS reader,
              has_table_privilege('pg_monitor', 'bpf_stats.' || v, 'SELECT') AS monitor,
              EXISTS (SELECT 1 FROM aclexplode((SELECT relacl FROM pg_class WHERE oid = ('bpf_stats.' || v)::regclass)) x WHERE x.grantee = 0) AS public
         FROM unnest(ARRAY['query_time', 'query_locks', 'query_io']) v`,
    );
    expect(grants).toEqual([
      { view: 'query_time', reader: true, monitor: true, public: false },
      { view: 'query_locks', reader: true, monitor: true, public: false },
      { view: 'query_io', reader: false, monitor: true, public: false },
    ]);
  });

  it('stops with one line when an object outside bpf_stats depends on a view it must re-create, and changes nothing', async () => {
    await migrateSchema(client);
    await client.query(`DROP VIEW bpf_stats.query_io;
      CREATE VIEW bpf_stats.query_io AS SELECT q.node, q.calls AS older_column FROM bpf_stats.query_stats q;
      CREATE VIEW public.my_io AS SELECT * FROM bpf_stats.query_io;
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    try {
      const error = await migrateSchema(client).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(UserError);
      expect((error as Error).message).toMatch(
        /^cannot re-create the bpf_stats views whose columns change in this version: .*view my_io depends on view bpf_stats.query_io.*; drop it, run `pg-bpf-stats migrate`, then create it again$/,
      );
      expect((error as Error).message).not.toContain('\n');
      // Rolled back: the older view and the comment are as they were.
      const { rows } = await client.query(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'bpf_stats.query_io'::regclass AND attnum > 0 ORDER BY attnum",
      );
      expect(rows.map((r) => r.attname)).toEqual(['node', 'older_column']);
      expect(await schemaComment()).toBe('pg-bpf-stats: an older version');
    } finally {
      await client.query('DROP VIEW public.my_io');
    }
    await migrateSchema(client);
    const { rows } = await client.query(
      "SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'bpf_stats.query_io'::regclass AND attname = 'older_column'",
    );
    expect(rows[0].n).toBe(0);
  });

  it('rebuilds bpf_stats.query_increments from the metric column list when an older migration left another order', async () => {
    await migrateSchema(client);
    const attributes = async () =>
      (
        await client.query<{ name: string; type: string }>(
          `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
            WHERE a.attrelid = (SELECT typrelid FROM pg_type WHERE oid = 'bpf_stats.query_increments'::regtype) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
        )
      ).rows;
    const wanted = queryIncrementsAttributes();
    expect(await attributes()).toEqual(wanted);
    const typeOid = async () => (await client.query("SELECT 'bpf_stats.query_increments'::regtype::oid::int AS oid")).rows[0].oid as number;
    const unchanged = await typeOid();
    // ALTER TYPE ... ADD ATTRIBUTE appends: the last metric column of the list where an added
    // one lands, after the others.
    const moved = wanted[5]!;
    await client.query(`ALTER TYPE bpf_stats.query_increments DROP ATTRIBUTE ${moved.name}, ADD ATTRIBUTE ${moved.name} ${moved.type};
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    expect((await attributes()).at(-1)).toEqual(moved);
    const said: string[] = [];
    await migrateSchema(client, (line) => said.push(line));
    expect(await attributes()).toEqual(wanted);
    expect(said).toContain("rebuilt bpf_stats.query_increments for this version's metric columns");
    expect(await typeOid()).not.toBe(unchanged);
    // And left alone (same oid) when it fits, even by `migrate`.
    const rebuilt = await typeOid();
    await migrateSchema(client, undefined, undefined, { reapply: true });
    expect(await typeOid()).toBe(rebuilt);
  });

  it('stops with one line when something outside bpf_stats uses the row type it must rebuild, and changes nothing', async () => {
    await migrateSchema(client);
    await client.query(`ALTER TYPE bpf_stats.query_increments DROP ATTRIBUTE calls, ADD ATTRIBUTE calls int8;
      CREATE TABLE public.kept_increments (row bpf_stats.query_increments);
      CREATE FUNCTION public.sum_increments(bpf_stats.query_increments) RETURNS float8 LANGUAGE sql AS 'SELECT $1.total_time_ms';
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    try {
      const error = await migrateSchema(client).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(UserError);
      expect((error as Error).message).toMatch(
        /^cannot rebuild bpf_stats.query_increments for this version's metric columns: .*(column row of table kept_increments|function sum_increments\(bpf_stats.query_increments\)) depends on type bpf_stats.query_increments.*; drop what depends on it and start again$/,
      );
      expect((error as Error).message).not.toContain('\n');
      expect(await schemaComment()).toBe('pg-bpf-stats: an older version');
    } finally {
      await client.query('DROP TABLE public.kept_increments; DROP FUNCTION public.sum_increments(bpf_stats.query_increments)');
    }
    await migrateSchema(client);
  });

  it('refuses, in one line, tables without a metric column or with one NOT NULL that a flush leaves NULL', async () => {
    await migrateSchema(client);
    await client.query(`ALTER TABLE bpf_stats.query_stats_history RENAME COLUMN blk_read_ios TO blk_read_ios_renamed;
      ALTER TABLE bpf_stats.backend_stats ALTER COLUMN reclaim_ms SET NOT NULL;
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    try {
      const error = await migrateSchema(client).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(UserError);
      expect((error as Error).message).toBe(
        'cannot bring the bpf_stats schema up to date: bpf_stats.backend_stats.reclaim_ms is NOT NULL, but a flush writes NULL while memory is off; ' +
          'bpf_stats.query_stats_history.blk_read_ios is missing (a migration adds it: bigint, nullable, no default) (CONTRIBUTING.md, "Recipe: add a metric column")',
      );
    } finally {
      await client.query(`ALTER TABLE bpf_stats.query_stats_history RENAME COLUMN blk_read_ios_renamed TO blk_read_ios;
        ALTER TABLE bpf_stats.backend_stats ALTER COLUMN reclaim_ms DROP NOT NULL`);
    }
    await migrateSchema(client);
  });

  it("lets a reader queued behind the views' rebuild read the new view, never an error", async () => {
    await migrateSchema(client);
    await client.query(`DROP VIEW bpf_stats.query_time;
      CREATE VIEW bpf_stats.query_time AS SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, q.calls AS older_column FROM bpf_stats.query_stats q;
      COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'`);
    const activityOid = async () => (await client.query("SELECT 'bpf_stats.activity'::regclass::oid::int AS oid")).rows[0].oid as number;
    const before = await activityOid();
    const session = async () => {
      const c = new pg.Client(cluster.connectionString());
      await c.connect();
      return c;
    };
    const [holder, reader] = [await session(), await session()];
    const pidOf = (c: pg.Client) => (c as unknown as { processID: number }).processID;
    const waiting = async (c: pg.Client) =>
      (await client.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND NOT granted', [pidOf(c)])).rows[0]!.n;
    try {
      // A long read of query_io: the views are dropped in name order, so the rebuild holds
      // activity's lock while it waits for query_io, and a reader of activity queues behind it.
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM bpf_stats.query_io');
      const rebuilder = new pg.Client(cluster.connectionString());
      await rebuilder.connect();
      try {
        const migrating = migrateSchema(rebuilder);
        await expect.poll(() => waiting(rebuilder), { timeout: 5_000 }).toBeGreaterThan(0);
        const read = reader.query('SELECT * FROM bpf_stats.activity LIMIT 1');
        await expect.poll(() => waiting(reader), { timeout: 5_000 }).toBeGreaterThan(0);
        await holder.query('COMMIT');
        await migrating;
        const result = await read;
        expect(result.fields.map((f) => f.name)).toContain('on_cpu_ms');
      } finally {
        await rebuilder.end();
      }
      // The reader read the view created while it waited, not the one it had found.
      expect(await activityOid()).not.toBe(before);
      const { rows } = await client.query(
        "SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'bpf_stats.query_time'::regclass AND attname = 'on_cpu_share'",
      );
      expect(rows[0].n).toBe(1);
    } finally {
      await holder.end();
      await reader.end();
    }
  });
});
