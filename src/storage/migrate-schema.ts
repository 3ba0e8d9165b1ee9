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

/**
 * Brings the bpf_stats schema up to date: node-pg-migrate applies migrations/ (the tables),
 * then every file of sql/ (views and functions, all CREATE OR REPLACE) is applied in name
 * order in one transaction, with the metric columns' comments from their families. Safe to run on every start and from several hosts at once.
 * The session names `node` first (default: this server's default node name): rows that exist
 * before the node column does belong to it.
 *
 * sql/ is applied again only when something may differ: a migration ran, the definitions or
 * the role are not those last applied (their fingerprint ends the schema's comment, which
 * every version's sql/ rewrites, so a start of an older version clears it), or `reapply`
 * (`pg-bpf-stats migrate`). Applying it was most of a start's schema work: 25 ms on an idle
 * server, 70-110 ms under load (README, "Start-up").
 *
 * @example
 * await migrateSchema(client);
 */
export async function migrateSchema(
  client: pg.Client,
  log: (line: string) => void = () => undefined,
  node?: string,
  { reapply = false }: { reapply?: boolean } = {},
): Promise<void> {
  await nameNode(client, node ?? (await defaultNodeName(client)));
  await client.query('CREATE SCHEMA IF NOT EXISTS bpf_stats');
  let ran: unknown[];
  try {
    ran = await runner({
      dbClient: client,
      dir: join(packageRoot(), 'migrations'),
      direction: 'up',
      migrationsSchema: 'bpf_stats',
      migrationsTable: 'migrations',
      checkOrder: true,
      log: (line: string) => log(line),
      logger: { debug: () => undefined, info: log, warn: log, error: log },
    });
  } catch (error) {
    if (databaseFailure(error)) throw error;
    // node-pg-migrate rethrows some failures as a plain Error with the cause's stack in its
    // message (a restart while it checks its table): one line of it, as an environment failure.
    const [first] = (error instanceof Error ? error.message : String(error)).split(/\n\s+at /);
    throw new UserError(`cannot bring the bpf_stats schema up to date: ${oneLine(first)}`);
  }
  const sqlDir = join(packageRoot(), 'sql');
  const files = readdirSync(sqlDir)
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((name) => ({ name, text: readFileSync(join(sqlDir, name), 'utf8') }));
  const role = (await client.query<{ role: string }>('SELECT current_user AS role')).rows[0]!.role;
  const fingerprint = definitionsFingerprint(files, role);
  if (!reapply && ran.length === 0 && (await appliedFingerprint(client)) === fingerprint) return;
  await client.query('BEGIN');
  try {
    // Serialise with other sidecars re-creating the same views.
    await client.query("SELECT pg_advisory_xact_lock(hashtext('bpf_stats.sql'))");
    for (const file of files) await client.query(file.text);
    await commentMetricColumns(client);
    await markApplied(client, fingerprint);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
}

/** Ends the schema's comment; what follows it is the fingerprint. */
const APPLIED_MARK = ' Definitions applied: ';

/** What sql/ and the column comments would write, and the role that would own and grant it. */
function definitionsFingerprint(files: Array<{ name: string; text: string }>, role: string): string {
  const hash = createHash('sha256');
  for (const file of files) hash.update(`${file.name}\0${file.text}\0`);
  for (const column of METRIC_COLUMNS) hash.update(`${column.column}\0${column.description}\0`);
  hash.update(role);
  return hash.digest('hex').slice(0, 16);
}

async function appliedFingerprint(client: pg.Client): Promise<string | null> {
  const { rows } = await client.query<{ comment: string | null }>("SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment");
  const comment = rows[0]?.comment ?? '';
  const at = comment.lastIndexOf(APPLIED_MARK);
  return at < 0 ? null : comment.slice(at + APPLIED_MARK.length);
}

/** Appends the fingerprint to the comment sql/ just gave the schema. */
async function markApplied(client: pg.Client, fingerprint: string): Promise<void> {
  const { rows } = await client.query<{ comment: string | null }>("SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment");
  const comment = `${rows[0]?.comment ?? ''}${APPLIED_MARK}${fingerprint}`;
  await client.query(`COMMENT ON SCHEMA bpf_stats IS ${client.escapeLiteral(comment)}`);
}
