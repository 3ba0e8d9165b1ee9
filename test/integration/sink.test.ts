import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { runCli } from '../support/run-cli.js';
import { logMessages } from '../support/log-lines.js';

/*
 * A primary and a streaming hot standby of it (pg_basebackup -R) on this machine. The standby
 * cannot hold bpf_stats: its collector writes into the primary (run --sink) under its own node,
 * and is controlled there. Ground truth: each server's own pg_stat_statements.
 */

let primary: ThrowawayCluster;
let standby: ThrowawayCluster;
let admin: pg.Client;
const sidecars: Sidecar[] = [];

async function query<R extends pg.QueryResultRow>(dsn: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client(dsn);
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** The workload role's statements with their calls, as `server`'s pg_stat_statements counts them. */
async function pgssCalls(server: ThrowawayCluster): Promise<Map<string, number>> {
  const rows = await query<{ queryid: string; calls: string }>(
    server.connectionString(),
    "SELECT queryid::text, calls FROM pg_stat_statements WHERE userid = 'workload'::regrole AND toplevel",
  );
  return new Map(rows.map((r) => [r.queryid, Number(r.calls)]));
}

/** The workload role's statements of `node` with their calls, as bpf_stats in the primary holds them. */
async function sinkCalls(node: string): Promise<Map<string, number>> {
  const { rows } = await admin.query<{ queryid: string; calls: string }>(
    "SELECT queryid::text, calls FROM bpf_stats.query_stats WHERE node = $1 AND userid = 'workload'::regrole AND calls > 0",
    [node],
  );
  return new Map(rows.map((r) => [r.queryid, Number(r.calls)]));
}

async function until(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not yet (e.g. the standby has not replayed the table)
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

beforeAll(async () => {
  primary = await ThrowawayCluster.start();
  admin = new pg.Client(primary.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await primary.exec('pgbench', ['-i', '-q', '-s', '1', '-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', 'postgres']);
  await admin.query('CREATE ROLE workload LOGIN');
  await admin.query('GRANT SELECT ON ALL TABLES IN SCHEMA public TO workload');
  // A database that takes no writes: a sink there must be refused before anything is created.
  await admin.query('CREATE DATABASE readonly');
  await admin.query('ALTER DATABASE readonly SET default_transaction_read_only = on');
  standby = await primary.startStandby();
  await until(
    'the standby to replay the workload role',
    async () =>
      (
        await query<{ ok: boolean }>(
          standby.connectionString(),
          "SELECT has_table_privilege('workload', 'pgbench_accounts', 'SELECT') AS ok",
        )
      )[0]!.ok,
  );
}, 120_000);

afterAll(async () => {
  for (const sidecar of sidecars) await sidecar.stop();
  await admin?.end();
  await standby?.stop();
  await primary?.stop();
});

describe('a standby and a sink', () => {
  it('refuses a standby without a sink, and a sink that cannot take writes, in one line each, exit 2, creating nothing', async () => {
    const checked = await runCli(['check', '--dsn', standby.connectionString()]);
    expect(checked.code).toBe(2);
    expect(logMessages(checked.stderr)).toEqual([expect.stringMatching(/hot standby \(read-only\).*--sink DSN of the primary/)]);

    const ran = await runCli(['run', '--dsn', standby.connectionString(), '--duration', '1s']);
    expect(ran.code).toBe(2);
    expect(logMessages(ran.stderr)).toEqual([expect.stringMatching(/hot standby \(read-only\).*--sink/)]);

    const toStandby = await runCli(['run', '--dsn', standby.connectionString(), '--sink', standby.connectionString(), '--duration', '1s']);
    expect(toStandby.code).toBe(2);
    expect(logMessages(toStandby.stderr)).toEqual([
      expect.stringMatching(/^sink .* is a hot standby \(read-only\): give the primary's DSN to --sink$/),
    ]);

    const readOnly = await runCli([
      'run',
      '--dsn',
      standby.connectionString(),
      '--sink',
      primary.connectionString('readonly'),
      '--duration',
      '1s',
    ]);
    expect(readOnly.code).toBe(2);
    expect(logMessages(readOnly.stderr)).toEqual([expect.stringMatching(/^sink .* is read-only \(default_transaction_read_only = on\)/)]);
    const checkedReadOnly = await runCli(['check', '--dsn', standby.connectionString(), '--sink', primary.connectionString('readonly')]);
    expect(checkedReadOnly.code).toBe(2);

    const away = await runCli([
      'run',
      '--dsn',
      standby.connectionString(),
      '--sink',
      'postgresql://postgres@127.0.0.1:1/postgres',
      '--duration',
      '1s',
    ]);
    expect(away.code).toBe(2);
    expect(logMessages(away.stderr)).toEqual([
      expect.stringMatching(/^sink: cannot connect to PostgreSQL at postgresql:\/\/postgres@127\.0\.0\.1:1\/postgres/),
    ]);

    // Nothing was created in the read-only database nor in the primary's postgres database.
    expect(await query(primary.connectionString('readonly'), "SELECT 1 FROM pg_namespace WHERE nspname = 'bpf_stats'")).toEqual([]);
    expect(await query(primary.connectionString(), "SELECT 1 FROM pg_namespace WHERE nspname = 'bpf_stats'")).toEqual([]);
  }, 120_000);

  it("writes the standby's figures into the primary under its own node, calls equal to the standby's pg_stat_statements, controlled from the primary", async () => {
    // The primary's own collector (no sink), then the standby's, writing into the primary.
    sidecars.push(
      await Sidecar.start({
        connectionString: primary.connectionString(),
        intervalMs: 3_600_000,
        probeSets: ['query'],
        node: 'primary-node',
      }),
    );
    const onStandby = await Sidecar.start({
      connectionString: standby.connectionString(),
      sink: primary.connectionString(),
      intervalMs: 3_600_000,
      node: 'standby-node',
    });
    sidecars.push(onStandby);
    expect(onStandby.attached()).not.toContain('query');

    // A standby can neither write nor NOTIFY: the request is made on the sink, for the node.
    const { rows } = await admin.query<{ id: string }>(
      "SELECT bpf_stats.collect('{query}', interval '10 minutes', node => 'standby-node') AS id",
    );
    await until('the standby collector to take the request', async () => onStandby.attached().includes('query'));
    expect((await admin.query('SELECT status, node FROM bpf_stats.collections WHERE id = $1', [rows[0]!.id])).rows).toEqual([
      { status: 'running', node: 'standby-node' },
    ]);

    // From here on the standby's pg_stat_statements and our calls count the same statements.
    await query(standby.connectionString(), 'SELECT pg_stat_statements_reset()');
    await query(primary.connectionString(), 'SELECT pg_stat_statements_reset()');
    await standby.exec('pgbench', [
      '-S',
      '-n',
      '-t',
      '300',
      '-c',
      '2',
      '-h',
      standby.baseDir,
      '-p',
      String(standby.port),
      '-U',
      'workload',
      'postgres',
    ]);
    // The primary runs statements of its own, which must stay under its node.
    for (let i = 0; i < 7; i++)
      await query(primary.connectionString().replace('postgres@', 'workload@'), 'SELECT count(*) FROM pgbench_branches WHERE bid > $1', [
        i,
      ]);
    for (const sidecar of sidecars) expect((await sidecar.flush()).error).toBeNull();

    const standbyTruth = await pgssCalls(standby);
    const standbyOurs = await sinkCalls('standby-node');
    // pgbench -S: 2 clients x 300 transactions of one SELECT each, and its start-up statements.
    expect([...standbyTruth.values()]).toContain(600);
    expect(Object.fromEntries(standbyOurs)).toEqual(Object.fromEntries(standbyTruth));

    const primaryTruth = await pgssCalls(primary);
    const primaryOurs = await sinkCalls('primary-node');
    expect([...primaryTruth.values()]).toContain(7);
    expect(Object.fromEntries(primaryOurs)).toEqual(Object.fromEntries(primaryTruth));
    // Apart: no statement of one server is in the other's node.
    for (const id of primaryTruth.keys()) expect(standbyOurs.has(id)).toBe(false);
    for (const id of standbyTruth.keys()) expect(primaryOurs.has(id)).toBe(false);

    // The texts travelled with the figures: the sink shows the standby's statement text as the standby had it.
    const texts = await query<{ queryid: string; query: string }>(
      standby.connectionString(),
      "SELECT queryid::text, query FROM pg_stat_statements WHERE userid = 'workload'::regrole AND calls = 600",
    );
    const shown = await admin.query("SELECT query FROM bpf_stats.query_time WHERE node = 'standby-node' AND queryid = $1", [
      texts[0]!.queryid,
    ]);
    expect(shown.rows).toEqual([{ query: texts[0]!.query }]);
    expect(texts[0]!.query).toMatch(/^SELECT abalance FROM pgbench_accounts WHERE aid = \$1/);

    // Each collector's health row is under its node.
    const health = await admin.query('SELECT node, last_error FROM bpf_stats.health WHERE stopped_at IS NULL ORDER BY node');
    expect(health.rows).toEqual([
      { node: 'primary-node', last_error: null },
      { node: 'standby-node', last_error: null },
    ]);
  }, 120_000);
});
