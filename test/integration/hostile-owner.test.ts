import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { UserError } from '../../src/errors.js';
import { lockServer } from '../../src/postmaster/server-lock.js';
import { connect } from '../../src/storage/connect.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';

/*
 * The owner of a database (dbo, a plain role that owns database `owned`) and a role given
 * CREATE on the schema (mallory) against a superuser installing bpf_stats there. What they
 * plant before the install would run as whoever reads bpf_stats (local_nodes() runs as the
 * reader of the activity view): the install refuses it in one line naming the object and its
 * owner, and creates nothing; a schema someone else owns is no reason to trust its owner as a
 * collector. Ground truth: pg_namespace, pg_class, pg_proc and their owners, pg_roles.rolsuper.
 * Installs run migrateSchema on the collector's pinned connection, as `pg-bpf-stats migrate`
 * (reapply) and `run`'s start (no reapply) do.
 */
let cluster: ThrowawayCluster;
let admin: pg.Client; // superuser: the installing role

function dsn(database: string, user = 'postgres'): string {
  return cluster.connectionString(database).replace('postgres@', `${user}@`);
}

async function connectAs(user: string, database: string): Promise<pg.Client> {
  const client = new pg.Client(dsn(database, user));
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** migrateSchema on the collector's own kind of connection: what it threw, or null. */
async function install(database: string, reapply: boolean): Promise<unknown> {
  const client = await connect(dsn(database));
  try {
    await migrateSchema(client, () => undefined, undefined, { reapply });
    return null;
  } catch (error) {
    return error;
  } finally {
    await client.end();
  }
}

/** What the schema holds, with owners: nothing changed means this is the same after a refusal. */
async function contents(database: string): Promise<string[]> {
  const c = await connectAs('postgres', database);
  try {
    const { rows } = await c.query<{ what: string }>(
      `SELECT format('%s %s', pg_describe_object(classid, objid, 0), pg_get_userbyid(owner)) AS what FROM (
         SELECT 'pg_namespace'::regclass AS classid, oid AS objid, nspowner AS owner FROM pg_namespace WHERE nspname = 'bpf_stats'
         UNION ALL SELECT 'pg_class'::regclass, oid, relowner FROM pg_class WHERE relnamespace = to_regnamespace('bpf_stats')
         UNION ALL SELECT 'pg_proc'::regclass, oid, proowner FROM pg_proc WHERE pronamespace = to_regnamespace('bpf_stats')) o
       ORDER BY 1`,
    );
    return rows.map((r) => r.what);
  } finally {
    await c.end();
  }
}

const PLANTED = `CREATE FUNCTION bpf_stats.local_nodes() RETURNS SETOF text LANGUAGE plpgsql AS $$
  BEGIN
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
      EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
    END IF;
    RETURN;
  END $$`;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = await connectAs('postgres', 'postgres');
  await admin.query('CREATE ROLE dbo LOGIN; CREATE ROLE mallory LOGIN');
  for (const statement of ['CREATE DATABASE owned OWNER dbo', 'CREATE DATABASE granted', 'CREATE DATABASE installed'])
    await admin.query(statement);
}, 120_000);

afterAll(async () => {
  await admin?.end().catch(() => undefined);
  await cluster?.stop();
});

describe('a bpf_stats schema, or an object in it, that another role planted before the install', () => {
  it("a database owner's schema and function: refused in one line naming them and the owner, exit 2, nothing created, and no superuser made", async () => {
    const dbo = await connectAs('dbo', 'owned');
    try {
      await dbo.query('CREATE SCHEMA bpf_stats');
      await dbo.query(PLANTED);
    } finally {
      await dbo.end();
    }
    const before = await contents('owned');
    for (const reapply of [true, false]) {
      const refused = await install('owned', reapply);
      expect(refused).toBeInstanceOf(UserError);
      expect((refused as Error).message).toMatch(
        /^cannot install bpf_stats: schema bpf_stats belongs to role dbo, not to postgres \(the installing role\) or a superuser, .*run `pg-bpf-stats migrate` again$/,
      );
      expect((refused as Error).message).not.toMatch(/\n/);
    }
    expect(await contents('owned')).toEqual(before);
    expect(before).toEqual(['function bpf_stats.local_nodes() dbo', 'schema bpf_stats dbo']);

    // Even with the comment an install leaves (anyone can write it on a schema of their own).
    const installedHere = await connectAs('postgres', 'installed');
    await migrateSchema(installedHere);
    const { rows: marked } = await installedHere.query<{ comment: string }>(
      "SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment",
    );
    await installedHere.end();
    const owner = await connectAs('dbo', 'owned');
    await owner.query(`COMMENT ON SCHEMA bpf_stats IS ${owner.escapeLiteral(marked[0]!.comment)}`);
    await owner.end();
    const started = await install('owned', false);
    expect((started as Error).message).toMatch(/^cannot install bpf_stats: schema bpf_stats belongs to role dbo/);

    // The owner's function never ran as a superuser: dbo is none.
    expect((await admin.query("SELECT rolsuper FROM pg_roles WHERE rolname = 'dbo'")).rows).toEqual([{ rolsuper: false }]);
  }, 60_000);

  it('an object planted in a schema the installing role owns, by a role given CREATE on it: refused by name and owner; so is that grant alone', async () => {
    const own = await connectAs('postgres', 'granted');
    await own.query('CREATE SCHEMA bpf_stats');
    await own.query('GRANT USAGE, CREATE ON SCHEMA bpf_stats TO mallory');
    // The grant alone: what mallory could create after the check would run as the readers.
    const granted = await install('granted', true);
    expect((granted as Error).message).toMatch(
      /^cannot install bpf_stats: role mallory may create objects in schema bpf_stats, .*REVOKE CREATE ON SCHEMA bpf_stats FROM mallory/,
    );
    const mallory = await connectAs('mallory', 'granted');
    await mallory.query(`CREATE FUNCTION bpf_stats.node_of(role name) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
          EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
        END IF;
        RETURN NULL;
      END $$`);
    await mallory.query('CREATE TABLE bpf_stats.migrations (id integer, name text, run_on timestamp)');
    await mallory.end();
    await own.query('REVOKE CREATE ON SCHEMA bpf_stats FROM mallory');
    const before = await contents('granted');
    // Then what it planted: node-pg-migrate's table first (tables before functions), then the function.
    const table = await install('granted', true);
    expect(table).toBeInstanceOf(UserError);
    expect((table as Error).message).toMatch(
      /^cannot install bpf_stats: table bpf_stats\.migrations belongs to role mallory, not to postgres/,
    );
    await own.query('DROP TABLE bpf_stats.migrations');
    const fn = await install('granted', false);
    expect((fn as Error).message).toMatch(
      /^cannot install bpf_stats: function bpf_stats\.node_of\(name\) belongs to role mallory, not to postgres \(the installing role\) or a superuser/,
    );
    expect(await contents('granted')).toEqual(before.filter((what) => !what.startsWith('table bpf_stats.migrations')));
    // Given to the installing role (as the line says), it installs, and CREATE OR REPLACE rewrote the body.
    await own.query('ALTER FUNCTION bpf_stats.node_of(name) OWNER TO postgres');
    expect(await install('granted', true)).toBeNull();
    const { rows } = await own.query<{ body: string }>(
      "SELECT prosrc AS body FROM pg_proc WHERE oid = 'bpf_stats.node_of(name)'::regprocedure",
    );
    expect(rows[0]!.body).not.toMatch(/SUPERUSER/);
    await own.end();
  }, 60_000);

  it('an object planted after an install, by a role given CREATE since: the next start refuses it', async () => {
    expect(await install('installed', false)).toBeNull();
    const own = await connectAs('postgres', 'installed');
    await own.query('GRANT CREATE ON SCHEMA bpf_stats TO mallory; GRANT USAGE ON SCHEMA bpf_stats TO mallory');
    const mallory = await connectAs('mallory', 'installed');
    await mallory.query("CREATE FUNCTION bpf_stats.collect_all() RETURNS int LANGUAGE sql AS 'SELECT 1'");
    await mallory.end();
    await own.query('REVOKE CREATE ON SCHEMA bpf_stats FROM mallory');
    await own.end();
    // A start with nothing to apply still looks.
    const refused = await install('installed', false);
    expect((refused as Error).message).toMatch(/^cannot install bpf_stats: function bpf_stats\.collect_all\(\) belongs to role mallory/);
  }, 60_000);
});

describe('the one-collector-per-server lock', () => {
  it("does not trust the owner of a bpf_stats schema that is not the collector's role's or a superuser's", async () => {
    // dbo owns a database, creates bpf_stats there and holds the key under a collector's name.
    await admin.query('CREATE DATABASE squatted OWNER dbo');
    const squatter = await connectAs('dbo', 'squatted');
    await squatter.query('CREATE SCHEMA bpf_stats');
    await squatter.query("SET application_name = 'pg-bpf-stats (pid 4242 on forged-host)'");
    await squatter.query('SELECT pg_advisory_lock($1, 1)', [0x70676266]);
    const control = await connect(dsn('squatted'), 'pg-bpf-stats (pid 1 on test)');
    try {
      const note = await lockServer(control);
      expect(note).toMatch(/lock is held by backend \d+ \(role dbo\), which is not a collector: ignored/);
    } finally {
      await control.end();
      await squatter.end();
    }
  }, 60_000);
});
