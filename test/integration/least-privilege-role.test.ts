import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath, packageRoot } from '../../src/package-root.js';
import { collectCpuBurn } from '../support/collect-cpu-burn.js';
import { documentedBlocks } from '../support/markdown-blocks.js';
import { runCli } from '../support/run-cli.js';

/*
 * The collector's least-privileged role, set up as docs/operations.md#the-collectors-role says:
 * its SQL blocks run as written by a superuser on a throwaway cluster, then `migrate` and `run`
 * connect as the role the systemd env file names. Ground truth: the catalog (the role's
 * attributes and memberships, the schema's owner) and the scheduler's CPU time.
 */

/** The libpq variables of scripts/systemd/pg-bpf-stats.env (the unit's EnvironmentFile=). */
function unitEnvironment(): Record<string, string> {
  const text = readFileSync(join(packageRoot(), 'scripts/systemd/pg-bpf-stats.env'), 'utf8');
  return Object.fromEntries(
    text
      .split('\n')
      .filter((l) => /^[A-Z_]+=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

const { PGUSER: role, PGDATABASE: database } = unitEnvironment();
let cluster: ThrowawayCluster;
let admin: pg.Client;

/** The role's connection: the cluster's private socket, which trusts it as it would a peer-mapped service user. */
const roleDsn = () => cluster.connectionString(database).replace('postgres@', `${role}@`);

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString(database));
  await admin.connect();
  // The roles the docs' examples grant to: a DBA's existing ones.
  await admin.query('CREATE ROLE alice LOGIN; CREATE ROLE grafana LOGIN');
  for (const block of documentedBlocks('operations.md', "The collector's role", 'sql')) await admin.query(block);
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

describe("the collector's role as docs/operations.md creates it", () => {
  it("is the env file's PGUSER, a login role and not a superuser, nor a member of one", async () => {
    expect(role).toBe('bpf_stats_collector');
    const { rows } = await admin.query(
      `SELECT r.rolcanlogin, r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolbypassrls,
              EXISTS (SELECT 1 FROM pg_roles s WHERE s.rolsuper AND pg_has_role(r.oid, s.oid, 'MEMBER')) AS member_of_superuser,
              pg_has_role(r.oid, 'pg_monitor', 'MEMBER') AS monitor,
              has_database_privilege(r.oid, current_database(), 'CREATE') AS can_create
         FROM pg_roles r WHERE r.rolname = $1`,
      [role],
    );
    expect(rows).toEqual([
      {
        rolcanlogin: true,
        rolsuper: false,
        rolcreaterole: false,
        rolcreatedb: false,
        rolreplication: false,
        rolbypassrls: false,
        member_of_superuser: false,
        monitor: true,
        can_create: true,
      },
    ]);
  });

  it('migrates: bpf_stats is created and owned by the role, and pg_monitor members read it', async () => {
    const migrate = await runCli(['migrate', '--dsn', roleDsn()]);
    expect(migrate.code, migrate.stderr).toBe(0);
    const { rows } = await admin.query("SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = 'bpf_stats'");
    expect(rows).toEqual([{ owner: role }]);
    const grafana = new pg.Client(cluster.connectionString(database).replace('postgres@', 'grafana@'));
    await grafana.connect();
    try {
      await expect(grafana.query('SELECT count(*) FROM bpf_stats.query_stats')).resolves.toBeDefined();
    } finally {
      await grafana.end();
    }
  });

  it("runs and collects: the on-CPU time it writes matches the scheduler's", async () => {
    const outcome = await collectCpuBurn(cluster, [process.execPath, cliPath()], process.env, roleDsn());
    expect(outcome.code, outcome.stderr).toBe(0);
    expect(outcome.oursMs, outcome.stderr).not.toBeNull();
    expect(Math.abs(outcome.oursMs! - outcome.truthMs)).toBeLessThanOrEqual(0.1 * outcome.truthMs + 20);
    // Its writes ran as the role: no statement wrote bpf_stats as anyone else.
    const { rows } = await admin.query(
      "SELECT DISTINCT pg_get_userbyid(userid) AS who FROM public.pg_stat_statements WHERE query ~* 'insert\\s+into\\s+bpf_stats\\.'",
    );
    expect(rows.map((r) => r.who)).toEqual([role]);
  }, 60_000);
});
