import { execFile, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../../src/package-root.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';

/*
 * SQL regression tests of the bpf_stats schema, the way PostgreSQL's pg_regress runs them:
 * each test/sql/<name>.sql runs through psql (-X -a -q, read from stdin, errors inline) in a
 * database of its own on a private cluster, with the schema applied by the project's own
 * migrateSchema and pg_stat_statements installed, and its output must equal
 * test/expected/<name>.out byte for byte. On a mismatch the test shows `diff -u expected actual`
 * (the actual output is kept in $TMPDIR/pg-bpf-stats-sql-regression/<name>.out).
 *
 * The .sql files insert rows with known values and read every view and function; the values
 * they expect are computed by hand in their comments. To regenerate the expected files after a
 * deliberate change, run
 *
 *     UPDATE_EXPECTED=1 npx vitest run test/integration/sql-regression.test.ts
 *
 * and check the new output against those comments (git diff test/expected) before committing.
 */
const run = promisify(execFile);
const sqlDir = join(packageRoot(), 'test', 'sql');
const expectedDir = join(packageRoot(), 'test', 'expected');
const resultsDir = join(tmpdir(), 'pg-bpf-stats-sql-regression');
const update = process.env.UPDATE_EXPECTED === '1';
const files = readdirSync(sqlDir)
  .filter((f) => f.endsWith('.sql'))
  .sort();

let cluster: ThrowawayCluster;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  mkdirSync(resultsDir, { recursive: true });
});

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

/** A fresh database with pg_stat_statements and the bpf_stats schema, as a sidecar start leaves it. */
async function createDatabase(name: string): Promise<string> {
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name}`);
  const client = new pg.Client(cluster.connectionString(name));
  await client.connect();
  try {
    await client.query('CREATE EXTENSION pg_stat_statements');
    await migrateSchema(client);
  } finally {
    await client.end();
  }
  return cluster.connectionString(name);
}

/** psql's output for `file`, stdout and stderr interleaved as written, with settings fixed for stable output. */
async function runPsql(file: string, dsn: string, out: string): Promise<string> {
  const input = openSync(file, 'r');
  const output = openSync(out, 'w');
  try {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      LANG: 'C',
      LC_ALL: 'C',
      PGTZ: 'UTC',
      PGDATESTYLE: 'ISO, MDY',
      PGCLIENTENCODING: 'UTF8',
      PGAPPNAME: 'pg_regress',
      PGOPTIONS: '-c lc_messages=C -c intervalstyle=postgres -c extra_float_digits=1',
    };
    const child = spawn(join(cluster.pgBin, 'psql'), ['-X', '-a', '-q', '-d', dsn], { stdio: [input, output, output], env });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', resolve);
    });
    expect(code, `psql exited with ${code}`).toBe(0);
  } finally {
    closeSync(input);
    closeSync(output);
  }
  return readFileSync(out, 'utf8');
}

describe('SQL regression (test/sql -> test/expected)', () => {
  it.each(files)('%s', async (file) => {
    const name = basename(file, '.sql');
    const dsn = await createDatabase(`regress_${name}`);
    const actualFile = join(resultsDir, `${name}.out`);
    const actual = await runPsql(join(sqlDir, file), dsn, actualFile);
    const expectedFile = join(expectedDir, `${name}.out`);
    if (update) {
      mkdirSync(expectedDir, { recursive: true });
      writeFileSync(expectedFile, actual);
      return;
    }
    const expected = readFileSync(expectedFile, 'utf8');
    if (actual !== expected) {
      const diff = await run('diff', ['-u', expectedFile, actualFile]).then(
        () => '',
        (error: { stdout?: string }) => error.stdout ?? '',
      );
      expect.fail(`${name}.out differs from the expected output:\n${diff}`);
    }
  });
});

describe('schema comments', () => {
  it('leaves no table, view, column or function of bpf_stats without a comment', async () => {
    const client = new pg.Client(cluster.connectionString('regress_comments_check'));
    await createDatabase('regress_comments_check');
    await client.connect();
    try {
      const { rows } = await client.query(`
        SELECT c.relname || coalesce('.' || a.attname, '') AS missing
          FROM pg_class c
          LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
           AND NOT c.relispartition
           AND (col_description(c.oid, a.attnum) IS NULL OR obj_description(c.oid, 'pg_class') IS NULL)
        UNION ALL
        SELECT p.oid::regprocedure::text
          FROM pg_proc p
         WHERE p.pronamespace = 'bpf_stats'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
        ORDER BY 1`);
      expect(rows.map((r) => r.missing as string)).toEqual([]);
    } finally {
      await client.end();
    }
  });
});
