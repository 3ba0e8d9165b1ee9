import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import type pg from 'pg';
import { databaseFailure, oneLine, UserError } from '../errors.js';
import { packageRoot } from '../package-root.js';
import { commentMetricColumns } from './metric-column-comments.js';
import { defaultNodeName, nameNode } from '../sink/node-name.js';

/**
 * Brings the bpf_stats schema up to date: node-pg-migrate applies migrations/ (the tables),
 * then every file of sql/ (views and functions, all CREATE OR REPLACE) is applied in name
 * order in one transaction, with the metric columns' comments from their families. Safe to run on every start and from several hosts at once.
 * The session names `node` first (default: this server's default node name): rows that exist
 * before the node column does belong to it.
 *
 * @example
 * await migrateSchema(client);
 */
export async function migrateSchema(client: pg.Client, log: (line: string) => void = () => undefined, node?: string): Promise<void> {
  await nameNode(client, node ?? (await defaultNodeName(client)));
  await client.query('CREATE SCHEMA IF NOT EXISTS bpf_stats');
  try {
    await runner({
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
  const files = readdirSync(sqlDir).filter((f) => f.endsWith('.sql')).sort();
  await client.query('BEGIN');
  try {
    // Serialise with other sidecars re-creating the same views.
    await client.query("SELECT pg_advisory_xact_lock(hashtext('bpf_stats.sql'))");
    for (const file of files) await client.query(readFileSync(join(sqlDir, file), 'utf8'));
    await commentMetricColumns(client);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  }
}
