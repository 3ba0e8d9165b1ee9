import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import type pg from 'pg';
import { databaseFailure, oneLine, UserError } from '../errors.js';
import { packageRoot } from '../package-root.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { commentMetricColumns } from './metric-column-comments.js';
import { defaultNodeName, nameNode } from '../sink/node-name.js';
import { lockMigrations, unlockMigrations } from '../instance/server-lock.js';

/**
 * How long migrating waits for any lock (a view or table another session holds open, another
 * collector migrating) before it ends with one line: it never waits forever.
 */
export const MIGRATE_LOCK_TIMEOUT_MS = 10_000;

/**
 * Brings the bpf_stats schema up to date: node-pg-migrate applies migrations/ (the tables),
 * then every file of sql/ (views and functions, all CREATE OR REPLACE) is applied in name
 * order in one transaction, with the metric columns' comments from their families. Safe to run on every start and from several hosts at once.
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
  const { role, owner, comment } = (
    await client.query<{ role: string; owner: string | null; comment: string | null }>(
      `SELECT current_user AS role, (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'bpf_stats') AS owner,
              obj_description(to_regnamespace('bpf_stats'), 'pg_namespace') AS comment`,
    )
  ).rows[0]!;
  // A sink's node role (src/sink/sink.ts) may change nothing in the schema: it only checks that
  // the owner brought it up to this version.
  const fingerprint = definitionsFingerprint([...migrations, ...files], asNode ? (owner ?? role) : role);
  if (!reapply && appliedFingerprint(comment) === fingerprint) return;
  if (asNode) {
    throw new UserError(`sink: bpf_stats there is not up to date for this version of pg-bpf-stats: its owner${owner ? ` (${owner})` : ''} runs \`pg-bpf-stats migrate --dsn SINK\` first`);
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

/** Runs migrations/ and applies sql/ (the caller serialises and bounds the lock waits). */
async function applyDefinitions(
  client: pg.Client,
  migrationsDir: string,
  files: Array<{ name: string; text: string }>,
  fingerprint: string,
  log: (line: string) => void,
): Promise<void> {
  await client.query('CREATE SCHEMA IF NOT EXISTS bpf_stats');
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
    for (const file of files) await client.query(file.text);
    await commentMetricColumns(client);
    await markApplied(client, fingerprint);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
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
  for (const column of METRIC_COLUMNS) hash.update(`${column.column}\0${column.description}\0`);
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
  const { rows } = await client.query<{ comment: string | null }>("SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment");
  const comment = `${rows[0]?.comment ?? ''}${APPLIED_MARK}${fingerprint}`;
  await client.query(`COMMENT ON SCHEMA bpf_stats IS ${client.escapeLiteral(comment)}`);
}
