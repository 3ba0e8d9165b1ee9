import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import type pg from 'pg';
import { databaseFailure, oneLine, UserError } from '../errors.js';
import { packageRoot } from '../package-root.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { commentMetricColumns } from './metric-column-comments.js';
import { checkMetricColumns, queryIncrementsAttributes, rebuildQueryIncrementsType } from './metric-schema.js';
import { defaultNodeName, nameNode } from './node-name.js';
import { lockMigrations, unlockMigrations } from '../postmaster/server-lock.js';

/**
 * How long migrating waits for any lock (a view or table another session holds open, another
 * collector migrating) before it ends with one line: it never waits forever.
 */
export const MIGRATE_LOCK_TIMEOUT_MS = 10_000;

/**
 * Brings the bpf_stats schema up to date: node-pg-migrate applies migrations/ (the tables),
 * then every file of sql/ (views and functions, all CREATE OR REPLACE) is applied in name
 * order in one transaction, with the metric columns' comments from their families. Safe to run on every start and from several hosts at once.
 * What follows the metric column list is made to fit it in that transaction (metric-schema.ts):
 * the tables are checked for every column, and bpf_stats.query_increments is rebuilt when its
 * attributes differ; a view whose columns CREATE OR REPLACE cannot change (one added in the
 * middle, renamed, retyped) gets every bpf_stats view dropped and created again, their grants
 * kept.
 * The session names `node` first (default: this server's default node name): rows that exist
 * before the node column does belong to it.
 *
 * Both are skipped when the schema already holds what they would write: the fingerprint of
 * migrations/, sql/, the column comments and the role that applied them ends the schema's
 * comment. Every version's sql/ rewrites that comment, so a start of an older version clears
 * it; `reapply` (`pg-bpf-stats migrate`) applies everything whatever it says. Applying sql/
 * took 25 ms of an idle start and 70-110 ms under load, node-pg-migrate's check of an
 * up-to-date schema another eight round trips (bench/journal/start-up.md#six-cuts-to-the-start).
 *
 * @example
 * await migrateSchema(client);
 */
export async function migrateSchema(
  client: pg.Client,
  log: (line: string) => void = () => undefined,
  node?: string,
  { reapply = false, asNode = false }: { reapply?: boolean; asNode?: boolean } = {},
): Promise<void> {
  await nameNode(client, node ?? (await defaultNodeName(client)));
  const migrationsDir = join(packageRoot(), 'migrations');
  const sqlDir = join(packageRoot(), 'sql');
  const migrations = readDefinitions(migrationsDir);
  const files = readDefinitions(sqlDir).filter((f) => f.name.endsWith('.sql'));
  const { role, owner, comment, foreign_what, foreign_owner } = (
    await client.query<{ role: string; owner: string | null; comment: string | null } & ForeignObject>(
      `SELECT current_user AS role, (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'bpf_stats') AS owner,
              obj_description(to_regnamespace('bpf_stats'), 'pg_namespace') AS comment, f.foreign_what, f.foreign_owner
         FROM (SELECT) AS one LEFT JOIN LATERAL (${FOREIGN_OBJECT_SQL}) AS f ON true`,
    )
  ).rows[0]!;
  // A schema (or anything in it) another role owns is never used, not even when its comment
  // says it is up to date (anyone can write that comment on a schema of their own).
  if (!asNode) refuseForeign(role, { foreign_what, foreign_owner });
  // A sink's node role (src/sink/sink.ts) may change nothing in the schema: it only checks that
  // the owner brought it up to this version.
  const fingerprint = definitionsFingerprint([...migrations, ...files], asNode ? (owner ?? role) : role);
  if (!reapply && appliedFingerprint(comment) === fingerprint) return;
  if (asNode) {
    throw new UserError(
      `sink: bpf_stats there is not up to date for this version of pg-bpf-stats: its owner${owner ? ` (${owner})` : ''} runs \`pg-bpf-stats migrate --dsn SINK\` first`,
    );
  }
  const { rows: saved } = await client.query<{ wait: string }>("SELECT pg_catalog.current_setting('lock_timeout') AS wait");
  await client.query("SELECT pg_catalog.set_config('lock_timeout', $1, false)", [`${MIGRATE_LOCK_TIMEOUT_MS}ms`]);
  let serialised = false;
  try {
    serialised = await lockMigrations(client, MIGRATE_LOCK_TIMEOUT_MS);
    await applyDefinitions(client, migrationsDir, files, fingerprint, log);
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') {
      throw new UserError(
        `cannot bring the bpf_stats schema up to date: a lock on it stayed held for ${MIGRATE_LOCK_TIMEOUT_MS / 1000} s (${oneLine(error)}); a long transaction reading bpf_stats? try again once it ends`,
      );
    }
    throw error;
  } finally {
    if (serialised) await unlockMigrations(client).catch(() => undefined);
    await client.query("SELECT pg_catalog.set_config('lock_timeout', $1, false)", [saved[0]!.wait]).catch(() => undefined);
  }
}

interface ForeignObject {
  foreign_what: string | null;
  foreign_owner: string | null;
}

/**
 * SQL: the first thing in schema bpf_stats that neither the installing role (current_user) nor a
 * superuser owns — the schema itself, a table, view, sequence, index, function, procedure, type,
 * domain, operator, operator class or family, collation, conversion, text search configuration
 * or dictionary, extended statistics, extension — or else the first role other than those that
 * may create objects in it (foreign_what NULL: none). Such an owner could replace what the
 * collector and every reader run (bpf_stats.local_nodes(), called by the activity view, runs as
 * whoever reads it, superusers included): a database owner who created the schema before the
 * first install kept it and everything `CREATE OR REPLACE` wrote into it. node-pg-migrate's
 * table (bpf_stats.migrations) is one of the tables.
 */
const FOREIGN_OBJECT_SQL = `
  WITH ns AS (SELECT n.oid, n.nspowner, n.nspacl FROM pg_catalog.pg_namespace n WHERE n.nspname = 'bpf_stats'),
  trusted AS (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user OR r.rolsuper),
  owned AS (
    SELECT 'pg_namespace'::pg_catalog.regclass AS classid, ns.oid AS objid, ns.nspowner AS owner, 0 AS rank FROM ns
    UNION ALL SELECT 'pg_class'::pg_catalog.regclass, c.oid, c.relowner, 1 FROM pg_catalog.pg_class c JOIN ns ON c.relnamespace = ns.oid
    UNION ALL SELECT 'pg_proc'::pg_catalog.regclass, p.oid, p.proowner, 2 FROM pg_catalog.pg_proc p JOIN ns ON p.pronamespace = ns.oid
    UNION ALL SELECT 'pg_type'::pg_catalog.regclass, t.oid, t.typowner, 3 FROM pg_catalog.pg_type t JOIN ns ON t.typnamespace = ns.oid
    UNION ALL SELECT 'pg_operator'::pg_catalog.regclass, o.oid, o.oprowner, 4 FROM pg_catalog.pg_operator o JOIN ns ON o.oprnamespace = ns.oid
    UNION ALL SELECT 'pg_opclass'::pg_catalog.regclass, o.oid, o.opcowner, 5 FROM pg_catalog.pg_opclass o JOIN ns ON o.opcnamespace = ns.oid
    UNION ALL SELECT 'pg_opfamily'::pg_catalog.regclass, o.oid, o.opfowner, 5 FROM pg_catalog.pg_opfamily o JOIN ns ON o.opfnamespace = ns.oid
    UNION ALL SELECT 'pg_collation'::pg_catalog.regclass, o.oid, o.collowner, 6 FROM pg_catalog.pg_collation o JOIN ns ON o.collnamespace = ns.oid
    UNION ALL SELECT 'pg_conversion'::pg_catalog.regclass, o.oid, o.conowner, 6 FROM pg_catalog.pg_conversion o JOIN ns ON o.connamespace = ns.oid
    UNION ALL SELECT 'pg_ts_config'::pg_catalog.regclass, o.oid, o.cfgowner, 6 FROM pg_catalog.pg_ts_config o JOIN ns ON o.cfgnamespace = ns.oid
    UNION ALL SELECT 'pg_ts_dict'::pg_catalog.regclass, o.oid, o.dictowner, 6 FROM pg_catalog.pg_ts_dict o JOIN ns ON o.dictnamespace = ns.oid
    UNION ALL SELECT 'pg_statistic_ext'::pg_catalog.regclass, o.oid, o.stxowner, 6 FROM pg_catalog.pg_statistic_ext o JOIN ns ON o.stxnamespace = ns.oid
    UNION ALL SELECT 'pg_extension'::pg_catalog.regclass, e.oid, e.extowner, 6 FROM pg_catalog.pg_extension e JOIN ns ON e.extnamespace = ns.oid
  )
  SELECT x.foreign_what, x.foreign_owner FROM (
    SELECT pg_catalog.pg_describe_object(o.classid, o.objid, 0) AS foreign_what, pg_catalog.pg_get_userbyid(o.owner) AS foreign_owner,
           o.rank, o.objid
      FROM owned o WHERE o.owner NOT IN (SELECT t.oid FROM trusted t)
    UNION ALL
    SELECT 'the right to create objects in schema bpf_stats',
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END, 7, 0
      FROM ns, pg_catalog.aclexplode(ns.nspacl) a
     WHERE a.privilege_type = 'CREATE' AND a.grantee <> ns.nspowner AND a.grantee NOT IN (SELECT t.oid FROM trusted t)
  ) x
  ORDER BY x.rank, x.objid
  LIMIT 1`;

/** One line naming what another role owns in bpf_stats, and who (a UserError: exit 2). */
function refuseForeign(role: string, { foreign_what: what, foreign_owner: owner }: ForeignObject): void {
  if (what === null) return;
  if (what.startsWith('the right to create')) {
    throw new UserError(
      `cannot install bpf_stats: role ${owner} may create objects in schema bpf_stats, and what it creates there would run as whoever reads bpf_stats; the schema's owner runs \`REVOKE CREATE ON SCHEMA bpf_stats FROM ${owner}\` first`,
    );
  }
  throw new UserError(
    `cannot install bpf_stats: ${what} belongs to role ${owner}, not to ${role} (the installing role) or a superuser, so its owner could run code as whoever reads bpf_stats; check it, drop it (or the schema) or give it to ${role}, then run \`pg-bpf-stats migrate\` again`,
  );
}

/** Runs migrations/ and applies sql/ (the caller serialises and bounds the lock waits). */
async function applyDefinitions(
  client: pg.Client,
  migrationsDir: string,
  files: Array<{ name: string; text: string }>,
  fingerprint: string,
  log: (line: string) => void,
): Promise<void> {
  // Checked in the transaction that creates the schema (when it is missing), before anything
  // else is created: afterwards only its owner (this role), its members and superusers can
  // create objects in it, so nothing can be planted between this check and the migrations.
  await client.query('BEGIN');
  try {
    await client.query('CREATE SCHEMA IF NOT EXISTS bpf_stats');
    const { rows } = await client.query<{ role: string } & ForeignObject>(
      `SELECT current_user AS role, f.foreign_what, f.foreign_owner FROM (SELECT) AS one LEFT JOIN LATERAL (${FOREIGN_OBJECT_SQL}) AS f ON true`,
    );
    refuseForeign(rows[0]!.role, rows[0]!);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
  try {
    await runner({
      // Serialised by lockMigrations: node-pg-migrate's own key is a try-lock any role can hold.
      noLock: true,
      dbClient: client,
      dir: migrationsDir,
      direction: 'up',
      migrationsSchema: 'bpf_stats',
      migrationsTable: 'migrations',
      checkOrder: true,
      log: (line: string) => log(line),
      logger: { debug: () => undefined, info: log, warn: log, error: log },
    });
  } catch (error) {
    if (databaseFailure(error) || (error as { code?: string }).code === '55P03') throw error;
    // node-pg-migrate rethrows some failures as a plain Error with the cause's stack in its
    // message (a restart while it checks its table): one line of it, as an environment failure.
    const [first] = (error instanceof Error ? error.message : String(error)).split(/\n\s+at /);
    throw new UserError(`cannot bring the bpf_stats schema up to date: ${oneLine(first)}`);
  }
  await client.query('BEGIN');
  try {
    // Other sidecars re-creating the same views wait on lockMigrations (an advisory lock here was
    // one any role could hold, and the start waited for it forever).
    await checkMetricColumns(client);
    if (await rebuildQueryIncrementsType(client)) log("rebuilt bpf_stats.query_increments for this version's metric columns");
    await applySqlFiles(client, files, log);
    await commentMetricColumns(client);
    await markApplied(client, fingerprint);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
}

/**
 * Runs sql/'s files. CREATE OR REPLACE VIEW keeps a view's columns as they were and may only
 * append: when a file adds a column in the middle, renames or retypes one (42P16), every
 * bpf_stats view is dropped at once (ours depend on each other) and the files run again, in
 * the same transaction, so readers wait on the lock and then see the new views, never none.
 * The grants on them that sql/ does not make (a DBA's) are given again; objects of other schemas
 * built on them stop it with one line rather than being dropped (no CASCADE).
 */
async function applySqlFiles(client: pg.Client, files: Array<{ name: string; text: string }>, log: (line: string) => void): Promise<void> {
  await client.query('SAVEPOINT sql_files');
  try {
    for (const file of files) await client.query(file.text);
    return;
  } catch (error) {
    if ((error as { code?: string }).code !== '42P16') throw error;
    await client.query('ROLLBACK TO SAVEPOINT sql_files');
    log(`re-creating the bpf_stats views: ${oneLine(error)}`);
  }
  const { rows: views } = await client.query<{ name: string; grants: Array<{ grantee: string; privilege: string; grantable: boolean }> }>(
    `SELECT c.relname AS name,
            coalesce(pg_catalog.json_agg(pg_catalog.json_build_object('grantee', pg_catalog.pg_get_userbyid(x.grantee), 'privilege', x.privilege_type, 'grantable', x.is_grantable))
                       FILTER (WHERE x.grantee <> 0 AND x.grantee <> c.relowner), '[]') AS grants
       FROM pg_catalog.pg_class c
       LEFT JOIN LATERAL pg_catalog.aclexplode(c.relacl) x ON true
      WHERE c.relnamespace = 'bpf_stats'::pg_catalog.regnamespace AND c.relkind = 'v'
      GROUP BY c.relname
      ORDER BY c.relname`,
  );
  try {
    if (views.length) await client.query(`DROP VIEW ${views.map((v) => `bpf_stats.${client.escapeIdentifier(v.name)}`).join(', ')}`);
  } catch (error) {
    if ((error as { code?: string }).code !== '2BP01') throw error;
    const detail = (error as { detail?: string }).detail ?? '';
    throw new UserError(
      `cannot re-create the bpf_stats views whose columns change in this version: ${oneLine(error)}${detail ? ` (${oneLine(detail)})` : ''}; drop it, run \`pg-bpf-stats migrate\`, then create it again`,
    );
  }
  for (const file of files) await client.query(file.text);
  const { rows: present } = await client.query<{ name: string }>(
    "SELECT c.relname AS name FROM pg_catalog.pg_class c WHERE c.relnamespace = 'bpf_stats'::pg_catalog.regnamespace AND c.relkind = 'v'",
  );
  const exists = new Set(present.map((r) => r.name));
  const grants = views.flatMap((v) =>
    exists.has(v.name)
      ? v.grants.map(
          (g) =>
            `GRANT ${privilegeName(g.privilege)} ON bpf_stats.${client.escapeIdentifier(v.name)} TO ${client.escapeIdentifier(g.grantee)}${g.grantable ? ' WITH GRANT OPTION' : ''}`,
        )
      : [],
  );
  if (grants.length) await client.query(grants.join(';\n'));
}

/** A privilege aclexplode() named, checked before it is written into a GRANT. */
function privilegeName(privilege: string): string {
  if (!/^[A-Z ]+$/.test(privilege)) throw new Error(`unexpected privilege ${privilege}`);
  return privilege;
}

/** The files of `dir` in name order, with their text. */
function readDefinitions(dir: string): Array<{ name: string; text: string }> {
  return readdirSync(dir)
    .sort()
    .map((name) => ({ name, text: readFileSync(join(dir, name), 'utf8') }));
}

/** Ends the schema's comment; what follows it is the fingerprint. */
const APPLIED_MARK = ' Definitions applied: ';

/** What migrations/, sql/ and the column comments would write, and the role that would own and grant it. */
function definitionsFingerprint(files: Array<{ name: string; text: string }>, role: string): string {
  const hash = createHash('sha256');
  for (const file of files) hash.update(`${file.name}\0${file.text}\0`);
  for (const column of METRIC_COLUMNS)
    hash.update(`${column.column}\0${column.description}\0${column.unit}\0${column.measuredBy.join(',')}\0`);
  // The row type follows the list in code (metric-schema.ts), not a file: its shape is part of what is applied.
  for (const attribute of queryIncrementsAttributes()) hash.update(`${attribute.name}\0${attribute.type}\0`);
  hash.update(role);
  return hash.digest('hex').slice(0, 16);
}

/** The fingerprint at the end of the schema's comment, or null (no schema, no comment, no mark). */
function appliedFingerprint(comment: string | null): string | null {
  const at = comment?.lastIndexOf(APPLIED_MARK) ?? -1;
  return at < 0 ? null : comment!.slice(at + APPLIED_MARK.length);
}

/** Appends the fingerprint to the comment sql/ just gave the schema. */
async function markApplied(client: pg.Client, fingerprint: string): Promise<void> {
  const { rows } = await client.query<{ comment: string | null }>(
    "SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment",
  );
  const comment = `${rows[0]?.comment ?? ''}${APPLIED_MARK}${fingerprint}`;
  await client.query(`COMMENT ON SCHEMA bpf_stats IS ${client.escapeLiteral(comment)}`);
}
