import { hostname } from 'node:os';
import type pg from 'pg';
import { UserError } from '../errors.js';

/*
 * One collector per server (postmaster). The lock is a session-level advisory lock held by the
 * control connection, and it is checked across databases through pg_locks, which shows every
 * database's locks: so it is keyed by the server itself, whatever database, pid namespace,
 * mount namespace or host the collectors run in, and the server releases it when the
 * collector's session ends (exit, crash, kill -9, a restart of the server).
 *
 * Any role can take any advisory lock, so the lock alone proves nothing: a plain login role
 * holding this key made `run` refuse (exit 2, which a service manager does not restart). A
 * session counts as a collector only if it runs as a role trusted with bpf_stats: the same role
 * as ours, a superuser, or a role with the privileges of the schema's owner when that owner is
 * our role or a superuser (a schema someone else created is no credential). Such a role can stop
 * collection anyway (drop the schema), so trusting its lock gives nobody anything new; any other
 * holder is ignored, and we run without the key. A collector is also recognised by its control
 * session's application_name (set at connect, before this check), again only under a trusted
 * role: that is how a collector that could not take the key (a squatter holds it) is still seen
 * by the next one. A session's role (usesysid) is shown to every role, unlike most of
 * pg_stat_activity.
 *
 * Two collectors starting at once (in two databases, or one without the key) both see each
 * other and the later session (backend_start, then pid) gives up. The check creates nothing
 * that outlives the session.
 */
const LOCK_CLASS = 0x70676266; // 'pgbf'
const LOCK_OBJECT = 1;

/** The application_name of the control connection: names the collector to a second one. */
export function collectorApplicationName(): string {
  return `pg-bpf-stats (pid ${process.pid} on ${hostname()})`;
}

interface Holder {
  pid: number;
  datname: string | null;
  application_name: string | null;
  backend_start: Date | null;
  rolname: string | null;
}

/**
 * SQL: whether the role `who` (an oid) may count as a collector for a session running as `me`:
 * the same role, a superuser, or one with the privileges of the bpf_stats schema's owner when
 * that owner is `me` or a superuser. Any other owner is no reason to trust anyone: the owner of
 * a database can create a schema named bpf_stats before the collector is installed (install
 * then refuses it, src/storage/migrate-schema.ts), and was trusted as a collector for owning it.
 */
function trustedRole(who: string, me: string): string {
  return `coalesce(${who} = ${me}
                   OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = ${who})
                   OR EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles o ON o.oid = n.nspowner
                               WHERE n.nspname = 'bpf_stats' AND (n.nspowner = ${me} OR o.rolsuper)
                                 AND pg_catalog.pg_has_role(${who}, n.nspowner, 'USAGE')),
                   false)`;
}

/** The application_names collectorApplicationName() gives, as a LIKE pattern. */
const COLLECTOR_NAME_PATTERN = 'pg-bpf-stats (pid % on %)';

/**
 * Takes the server-wide collector lock on `client` (its session holds it), or throws a
 * UserError naming the collector that holds it. Returns a line to log when the key is held by a
 * session that is not a collector (ignored), else null.
 *
 * @example
 * const note = await lockServer(control); // before anything is created
 */
export async function lockServer(client: pg.Client): Promise<string | null> {
  const { rows: got } = await client.query<{ got: boolean }>('SELECT pg_catalog.pg_try_advisory_lock($1, $2) AS got', [
    LOCK_CLASS,
    LOCK_OBJECT,
  ]);
  const { rows: others } = await client.query<Holder & { mine: boolean; trusted: boolean; holds: boolean }>(
    `WITH me AS (
       SELECT a.backend_start, a.usesysid FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()
     ), holders AS (
       SELECT l.pid, l.database, true AS holds FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 2
          AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
       UNION ALL
       SELECT a.pid, a.datid, false FROM pg_catalog.pg_stat_activity a
        WHERE a.application_name LIKE $3 AND a.pid <> pg_catalog.pg_backend_pid()
     )
     SELECT DISTINCT ON (h.pid) h.pid, d.datname, a.application_name, a.backend_start, r.rolname,
            bool_or(h.holds) OVER (PARTITION BY h.pid) AS holds,
            (a.backend_start, h.pid) > (me.backend_start, pg_catalog.pg_backend_pid()) AS mine,
            ${trustedRole('a.usesysid', 'me.usesysid')} AS trusted
       FROM holders h CROSS JOIN me
       LEFT JOIN pg_catalog.pg_database d ON d.oid = h.database
       LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid
       LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
      ORDER BY h.pid`,
    [LOCK_CLASS, LOCK_OBJECT, COLLECTOR_NAME_PATTERN],
  );
  const collectors = others
    .filter((o) => o.trusted)
    .sort((a, b) => (a.backend_start?.getTime() ?? 0) - (b.backend_start?.getTime() ?? 0) || a.pid - b.pid);
  // `mine`: the other session started after ours; it is the one to give up.
  const first = collectors.find((o) => !o.mine);
  if (first) {
    if (got[0]?.got) await client.query('SELECT pg_catalog.pg_advisory_unlock($1, $2)', [LOCK_CLASS, LOCK_OBJECT]);
    throw new UserError(
      `another collector already runs on this server: ${describe(first)}; one collector per server (postmaster) — stop it first, or leave this one out`,
    );
  }
  if (got[0]?.got) return null;
  const squatter = others.find((o) => o.holds && !o.trusted);
  return `the one-collector-per-server lock is held by backend ${squatter?.pid ?? '?'} (role ${squatter?.rolname ?? '?'}), which is not a collector: ignored, running without it`;
}

function describe(holder: Holder): string {
  const who = holder.application_name?.startsWith('pg-bpf-stats (')
    ? holder.application_name.slice('pg-bpf-stats '.length).replace(/^\(|\)$/g, '')
    : `backend ${holder.pid}`;
  return `${who}, database ${holder.datname ?? '?'} (its backend ${holder.pid})`;
}

/** The advisory key that serialises migrations between collectors (LOCK_CLASS, this). */
const MIGRATE_OBJECT = 2;

/**
 * Serialises schema migrations between collectors (several may share a database: run --sink):
 * waits up to `waitMs` for a trusted session (as in lockServer) holding the key, then gives up
 * with a UserError naming it. A key held by any other role is ignored (returns false: migrate
 * without it) — it would otherwise stop every start that has something to migrate.
 * node-pg-migrate's own lock (a try-lock any role can hold) is off for the same reason.
 *
 * @example
 * const held = await lockMigrations(client, 10_000);
 * try { ... } finally { if (held) await unlockMigrations(client); }
 */
export async function lockMigrations(client: pg.Client, waitMs: number): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const { rows: got } = await client.query<{ got: boolean }>('SELECT pg_catalog.pg_try_advisory_lock($1, $2) AS got', [
      LOCK_CLASS,
      MIGRATE_OBJECT,
    ]);
    if (got[0]?.got) return true;
    const { rows: holders } = await client.query<{ pid: number; application_name: string | null }>(
      `SELECT l.pid, a.application_name
         FROM pg_catalog.pg_locks l
         JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         JOIN pg_catalog.pg_stat_activity me ON me.pid = pg_catalog.pg_backend_pid()
        WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 2 AND l.granted
          AND ${trustedRole('a.usesysid', 'me.usesysid')}`,
      [LOCK_CLASS, MIGRATE_OBJECT],
    );
    if (!holders.length) return false;
    if (Date.now() >= deadline) {
      const h = holders[0]!;
      throw new UserError(
        `cannot bring the bpf_stats schema up to date: another collector (${h.application_name || 'backend'} ${h.pid}) has been migrating it for over ${Math.round(waitMs / 1000)} s; try again once it is done`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export async function unlockMigrations(client: pg.Client): Promise<void> {
  await client.query('SELECT pg_catalog.pg_advisory_unlock($1, $2)', [LOCK_CLASS, MIGRATE_OBJECT]);
}
