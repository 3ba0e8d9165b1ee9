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
 * Advisory locks are per database, so two collectors starting at once in two databases can both
 * be granted theirs; both then see each other in pg_locks and the later session (backend_start,
 * then pid) gives up. The lock creates nothing that outlives the session.
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
}

/**
 * Takes the server-wide collector lock on `client` (its session holds it), or throws a
 * UserError naming the collector that holds it.
 *
 * @example
 * await lockServer(control); // before anything is created
 */
export async function lockServer(client: pg.Client): Promise<void> {
  const { rows: got } = await client.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS got', [LOCK_CLASS, LOCK_OBJECT]);
  const { rows: others } = await client.query<Holder & { mine: boolean }>(
    `SELECT l.pid, d.datname, a.application_name, a.backend_start,
            (a.backend_start, l.pid) > (me.backend_start, pg_backend_pid()) AS mine
       FROM pg_locks l
       LEFT JOIN pg_database d ON d.oid = l.database
       LEFT JOIN pg_stat_activity a ON a.pid = l.pid
       LEFT JOIN pg_stat_activity me ON me.pid = pg_backend_pid()
      WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 2
        AND l.granted AND l.pid <> pg_backend_pid()
      ORDER BY a.backend_start, l.pid`,
    [LOCK_CLASS, LOCK_OBJECT],
  );
  // `mine`: the other session started after ours; it is the one to give up.
  const first = others.find((o) => !o.mine);
  if (got[0]?.got && !first) return;
  if (got[0]?.got) await client.query('SELECT pg_advisory_unlock($1, $2)', [LOCK_CLASS, LOCK_OBJECT]);
  throw new UserError(`another collector already runs on this server: ${describe(first ?? others[0])}; one collector per server (postmaster) — stop it first, or leave this one out`);
}

function describe(holder: Holder | undefined): string {
  if (!holder) return 'its session is not visible to this role (pg_stat_activity)';
  const who = holder.application_name?.startsWith('pg-bpf-stats (') ? holder.application_name.slice('pg-bpf-stats '.length).replace(/^\(|\)$/g, '') : `backend ${holder.pid}`;
  return `${who}, database ${holder.datname ?? '?'} (its backend ${holder.pid})`;
}
