import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { oneLine, UserError } from '../errors.js';
import { connect, redact } from '../storage/connect.js';
import { nameNode } from '../storage/node-name.js';

/** Whether `client`'s server is a hot standby (in recovery: it cannot write or NOTIFY). */
export async function isStandby(client: pg.Client): Promise<boolean> {
  const { rows } = await client.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
  return rows[0]!.standby;
}

/** The one line for a standby without a sink (run and check). */
export const STANDBY_WITHOUT_SINK =
  'this server is a hot standby (read-only): bpf_stats cannot be written here; run with --sink DSN of the primary (or of a central database), e.g. --sink "host=primary dbname=postgres"';

/**
 * Opens the sink (the database bpf_stats is written into, when it is not the node's own) and
 * makes sure it can take writes before anything is created there or on the node: reachable,
 * not a standby, not read-only. Its session names the node (nameNode). A UserError otherwise.
 */
export async function openSink(dsn: string, node: string, applicationName: string): Promise<pg.Client> {
  let client: pg.Client;
  try {
    client = await connect(dsn, applicationName);
  } catch (error) {
    throw new UserError(`sink: ${oneLine(error)}`);
  }
  try {
    const { rows } = await client.query<{ standby: boolean; read_only: string }>(
      "SELECT pg_is_in_recovery() AS standby, current_setting('default_transaction_read_only') AS read_only",
    );
    if (rows[0]!.standby) throw new UserError(`sink ${redact(dsn)} is a hot standby (read-only): give the primary's DSN to --sink`);
    if (rows[0]!.read_only === 'on')
      throw new UserError(`sink ${redact(dsn)} is read-only (default_transaction_read_only = on): give a writable database to --sink`);
    await nameNode(client, node);
    return client;
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
}

/**
 * How this collector writes into its sink: 'owner' when its role owns bpf_stats there (or is a
 * superuser, or bpf_stats does not exist yet and it will create it), writing as it always did;
 * 'node' when its role is registered for `node` (bpf_stats.nodes: row-level security keeps it
 * to that node's rows and requests). A UserError in one line when the role is neither, is
 * registered for another node, or is a member of pg_monitor, bpf_stats_admin or pg_maintain (17+). The owner writing for a node is said once: that role can
 * change every node's rows, which a sink of several nodes should not allow.
 */
export async function sinkWriter(sink: pg.Client, node: string | null, log: (line: string) => void): Promise<'owner' | 'node'> {
  const { rows } = await sink.query<{ role: string; owner: boolean | null; registry: boolean }>(
    `SELECT current_user::text AS role,
            (SELECT r.rolsuper OR pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER')
               FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles r
              WHERE n.nspname = 'bpf_stats' AND r.rolname = current_user) AS owner,
            EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'bpf_stats' AND pg_catalog.has_schema_privilege(n.oid, 'USAGE'))
              AND coalesce(pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('bpf_stats.node_of(name)'), 'EXECUTE'), false) AS registry`,
  );
  const { role, owner, registry } = rows[0]!;
  // (a schema from before node roles has no registry: nobody is registered there)
  const registered =
    owner === false && registry
      ? (await sink.query<{ node: string | null }>('SELECT bpf_stats.node_of(current_user) AS node')).rows[0]!.node
      : null;
  if (owner !== false) {
    log(
      `sink: writing as ${role}, which ${owner === null ? 'creates' : 'owns'} bpf_stats there (or is a superuser): it can change every node's rows; where several nodes write, give each a role of its own (pg-bpf-stats sink-node add)`,
    );
    return 'owner';
  }
  if (registered === null) {
    const name = node ?? 'NODE';
    throw new UserError(
      `sink: role ${role} is not registered as a node there: the sink's owner runs \`pg-bpf-stats sink-node add ${name} --role ${role} --dsn SINK\` (or SELECT bpf_stats.add_node('${name}', '${role}'))`,
    );
  }
  // (null: `check`, which has no --node: any registered name will do)
  if (node !== null && registered !== node)
    throw new UserError(`sink: role ${role} is registered as node ${registered}, not ${node}: run with --node ${registered}`);
  // add_node refuses such roles; one registered before it did, or granted a membership since,
  // would reach every node's rows through the views (they run as the owner) or every node's
  // requests (collect() for any node).
  // pg_maintain (17+) may LOCK every table in any mode: it could hold off every node's flushes.
  const { rows: memberships } = await sink.query<{ rolname: string }>(
    `SELECT g.rolname::text AS rolname FROM pg_catalog.pg_roles g
      WHERE g.rolname IN ('pg_monitor', 'bpf_stats_admin', 'pg_maintain') AND pg_catalog.pg_has_role(current_user, g.oid, 'MEMBER')
      ORDER BY g.rolname`,
  );
  const memberOf = memberships.filter((r) => r.rolname !== 'pg_maintain');
  if (memberOf.length) {
    const names = memberOf.map((r) => r.rolname).join(' and ');
    throw new UserError(
      `sink: role ${role} (node ${registered}) is a member of ${names}, which would let it read or request for every node there: the sink's owner runs REVOKE ${memberOf.map((r) => r.rolname).join(', ')} FROM ${role}`,
    );
  }
  if (memberships.length)
    throw new UserError(
      `sink: role ${role} (node ${registered}) is a member of pg_maintain, which would let it lock every table there against the other nodes: the sink's owner runs REVOKE pg_maintain FROM ${role}`,
    );
  return 'node';
}

/**
 * Whether the sink is the node's own server (another database of it): then the writer's and the
 * control plane's backends run on the node and must be left out of its figures, as without a
 * sink. Seen from the node: a session of the sink's carries a name nobody else has.
 */
export async function sinkOnNode(node: pg.Client, sink: pg.Client): Promise<boolean> {
  const mark = `pg-bpf-stats sink ${randomUUID()}`;
  await sink.query(`SET application_name = '${mark}'`);
  try {
    const { rows } = await node.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [mark]);
    return rows[0]!.n > 0;
  } finally {
    await sink.query('RESET application_name');
  }
}

/**
 * `check`'s verdict on where bpf_stats would go: the node must be writable unless a sink is
 * given, and a sink must be reachable and writable. Writes nothing; a UserError otherwise.
 */
export async function checkSink(nodeDsn: string | undefined, sinkDsn: string | undefined): Promise<void> {
  const node = await connect(nodeDsn);
  try {
    if (!sinkDsn && (await isStandby(node))) throw new UserError(STANDBY_WITHOUT_SINK);
  } finally {
    await node.end().catch(() => undefined);
  }
  if (sinkDsn) {
    const sink = await openSink(sinkDsn, 'check', 'pg-bpf-stats check');
    try {
      // A role the sink would refuse at `run` is refused here too.
      await sinkWriter(sink, null, () => undefined);
    } finally {
      await sink.end();
    }
  }
}
