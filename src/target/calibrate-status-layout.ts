import type pg from 'pg';
import { UserError } from '../errors.js';
import type { PostmasterTarget, StatusLayout } from './postmaster-target.js';
import { ProcessMemory } from './process-memory.js';

/** PgBackendStatus is a few hundred bytes in 14–18; read generously. */
const STATUS_WINDOW = 1024;
/** Postgres timestamps count microseconds from 2000-01-01. */
const PG_EPOCH_UNIX_US = 946_684_800_000_000n;

/**
 * Where PgBackendStatus keeps the fields BPF reads, found on a live backend instead of
 * hard-coded per version: `probe` runs a query and goes idle, `observer` reads that backend's
 * row of pg_stat_activity, and the values (pid, backend_start, datid, usesysid, query_id) are
 * searched for in the backend's own PgBackendStatus through /proc/<pid>/mem. Works the same on
 * stripped builds and on versions whose struct layout moved.
 *
 * @example
 * const layout = await calibrateStatusLayout(target, probeClient, observerClient);
 */
export async function calibrateStatusLayout(
  target: PostmasterTarget,
  probe: pg.Client,
  observer: pg.Client,
): Promise<StatusLayout> {
  const pid = (await probe.query<{ pid: number }>('SELECT pg_backend_pid() AS pid /* pg-bpf-stats calibration */')).rows[0]!.pid;
  await waitForClientRead(observer, pid);
  const { rows } = await observer.query<{
    start_us: string;
    datid: number;
    usesysid: number;
    query_id: string | null;
    wait_event: string | null;
  }>(
    `SELECT (extract(epoch FROM backend_start) * 1000000)::bigint::text AS start_us,
            datid, usesysid, query_id::text AS query_id, wait_event
       FROM pg_stat_activity WHERE pid = $1`,
    [pid],
  );
  const row = rows[0];
  if (!row) throw new UserError(`calibration: backend ${pid} vanished from pg_stat_activity`);

  const memory = new ProcessMemory(pid);
  let status: bigint;
  let window: Buffer;
  let waitEvent: number;
  try {
    status = memory.readU64(target.addresses.myBEEntry);
    if (status === 0n) throw new Error('MyBEEntry is NULL');
    window = memory.read(status, STATUS_WINDOW);
    waitEvent = memory.readU32(memory.readU64(target.addresses.myWaitEventInfo));
  } catch (error) {
    throw new UserError(`calibration: cannot read backend ${pid}'s status: ${(error as Error).message}`);
  }

  const find = (needle: Buffer, what: string, align: number): number => {
    for (let at = 0; at + needle.length <= window.length; at += align) {
      if (window.compare(needle, 0, needle.length, at, at + needle.length) === 0) return at;
    }
    throw new UserError(`calibration: ${what} not found in PgBackendStatus of backend ${pid} (unsupported PostgreSQL build?)`);
  };
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n >>> 0);
    return b;
  };
  const u64 = (n: bigint) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt.asUintN(64, n));
    return b;
  };

  const procpidOffset = find(u32(pid), 'st_procpid', 4);
  const procStartOffset = find(u64(BigInt(row.start_us) - PG_EPOCH_UNIX_US), 'st_proc_start', 8);
  const dbidOffset = find(Buffer.concat([u32(row.datid), u32(row.usesysid)]), 'st_databaseid/st_userid', 4);
  const queryIdOffset = row.query_id === null || row.query_id === '0' ? null : find(u64(BigInt(row.query_id)), 'st_query_id', 8);
  if (row.wait_event !== 'ClientRead') {
    throw new UserError(`calibration: idle backend ${pid} waits on ${row.wait_event ?? 'nothing'}, expected ClientRead`);
  }
  return {
    procpidOffset,
    // st_backendType directly follows st_procpid in every version that has it.
    backendTypeOffset: procpidOffset + 4,
    procStartOffset,
    dbidOffset,
    useridOffset: dbidOffset + 4,
    queryIdOffset,
    clientReadEvent: waitEvent,
  };
}

/*
 * The probe's result reaches the client a moment before its backend reports ClientRead; on a
 * busy machine the observer can look in between. Give it up to a second to go idle.
 */
async function waitForClientRead(observer: pg.Client, pid: number): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const { rows } = await observer.query<{ wait_event: string | null }>('SELECT wait_event FROM pg_stat_activity WHERE pid = $1', [pid]);
    if (rows[0]?.wait_event === 'ClientRead') return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
