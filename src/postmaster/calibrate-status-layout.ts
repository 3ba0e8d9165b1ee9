import type pg from 'pg';
import { UserError } from '../errors.js';
import { procPidOf, type PostmasterTarget, type StatusLayout } from './postmaster-target.js';
import { ProcessMemory } from './process-memory.js';
import { PG_EPOCH_UNIX_US } from '../postgres-timestamp.js';

/** PgBackendStatus is a few hundred bytes in 14–18; read generously. */
const STATUS_WINDOW = 1024;
/** The probe backend's statement: its text is what st_activity_raw points to while it is idle. */
const CALIBRATION_QUERY = 'SELECT pg_backend_pid() AS pid /* pg-bpf-stats calibration */';

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
export async function calibrateStatusLayout(target: PostmasterTarget, probe: pg.Client, observer: pg.Client): Promise<StatusLayout> {
  const pid = (await probe.query<{ pid: number }>(CALIBRATION_QUERY)).rows[0]!.pid;
  type Row = {
    start_us: string;
    datid: number;
    usesysid: number;
    query_id: string | null;
    wait_event: string | null;
    query_start_us: string | null;
    state_change_us: string | null;
  };
  // The client has its result before the backend reports ClientRead: on a busy host that takes
  // a moment, so look again for up to a second before calling the backend odd. Idle, it is
  // there at the first or second look: the waits start short, not at 20 ms a look.
  let row: Row | undefined;
  for (let attempt = 0, waitedMs = 0; waitedMs < 1000; attempt++) {
    const { rows } = await observer.query<Row>(
      `SELECT (extract(epoch FROM backend_start) * 1000000)::bigint::text AS start_us,
              datid, usesysid, query_id::text AS query_id, wait_event,
              (extract(epoch FROM query_start) * 1000000)::bigint::text AS query_start_us,
              (extract(epoch FROM state_change) * 1000000)::bigint::text AS state_change_us
         FROM pg_stat_activity WHERE pid = $1`,
      [pid],
    );
    row = rows[0];
    if (!row || row.wait_event === 'ClientRead') break;
    const waitMs = Math.min(20, 2 ** attempt);
    await new Promise((resolve) => setTimeout(resolve, waitMs));
    waitedMs += waitMs;
  }
  if (!row) throw new UserError(`calibration: backend ${pid} vanished from pg_stat_activity`);

  const memory = new ProcessMemory(procPidOf(target, pid) ?? pid);
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

  checkStatementGlobals(target, memory, row.usesysid);

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
  const activityStart = activityStartOffset(window, row.query_start_us, row.state_change_us);
  // Before stateOffset() runs BEGIN and COMMIT, which replace the text.
  const activityRaw = activityRawOffset(memory, window);
  const state = await stateOffset(probe, memory, status, window, [procpidOffset, procStartOffset, dbidOffset], activityStart);
  const perStatementQueryIds = queryIdOffset === null ? null : await reportsEachStatementsId(probe);
  return {
    perStatementQueryIds,
    stateOffset: state.stateOffset,
    stateIdle: state.stateIdle,
    xactStartBeforeActivity: state.xactStartBeforeActivity,
    activityStartOffset: activityStart,
    activityRawOffset: activityRaw,
    procpidOffset,
    // st_backendType directly follows st_procpid in every version that has it.
    backendTypeOffset: procpidOffset + 4,
    procStartOffset,
    dbidOffset,
    useridOffset: dbidOffset + 4,
    queryIdOffset,
    clientReadEvent: waitEvent,
    clientBackendType: window.readInt32LE(procpidOffset + 4),
  };
}

/*
 * st_activity_start_timestamp and st_state_start_timestamp, side by side as BPF reads them in
 * one go (bpf/latency.bpf.h). The probe backend is idle: query_start is its last statement's
 * start and state_change the moment it went idle, both exact microseconds.
 */
function activityStartOffset(window: Buffer, queryStartUs: string | null, stateChangeUs: string | null): number | null {
  if (queryStartUs === null || stateChangeUs === null) return null;
  const needle = Buffer.alloc(16);
  needle.writeBigInt64LE(BigInt(queryStartUs) - PG_EPOCH_UNIX_US, 0);
  needle.writeBigInt64LE(BigInt(stateChangeUs) - PG_EPOCH_UNIX_US, 8);
  for (let at = 0; at + 16 <= window.length; at += 8) {
    if (window.compare(needle, 0, 16, at, at + 16) === 0) return at;
  }
  return null;
}

/*
 * st_activity_raw: the one pointer in the window whose target holds the probe backend's
 * statement text, NUL included (the other pointers lead to the application name, the client's
 * host name, SSL and GSS status). An address that is not mapped is skipped.
 */
function activityRawOffset(memory: ProcessMemory, window: Buffer): number | null {
  const text = Buffer.from(`${CALIBRATION_QUERY}\0`);
  for (let at = 0; at + 8 <= window.length; at += 8) {
    const address = window.readBigUInt64LE(at);
    if (address < 0x10000n || address >= 0x800000000000n) continue;
    try {
      if (memory.read(address, text.length).equals(text)) return at;
    } catch {
      // not an address in the backend
    }
  }
  return null;
}

/*
 * st_state: the one int that reads STATE_IDLE while the probe backend is idle and
 * STATE_IDLEINTRANSACTION (two more) once it ran BEGIN. Its value for idle moved between
 * versions (a state was added before it), so the value is calibrated along with the offset.
 */
async function stateOffset(
  probe: pg.Client,
  memory: ProcessMemory,
  status: bigint,
  idle: Buffer,
  known: number[],
  activityStart: number | null,
): Promise<{ stateOffset: number | null; stateIdle: number; xactStartBeforeActivity: boolean }> {
  let inTransaction: Buffer;
  await probe.query('BEGIN');
  try {
    inTransaction = memory.read(status, idle.length);
  } finally {
    await probe.query('COMMIT');
  }
  const candidates: Array<{ at: number; value: number }> = [];
  for (let at = 4; at + 4 <= idle.length; at += 4) {
    if (known.some((k) => at >= k && at < k + 8)) continue;
    const value = idle.readUInt32LE(at);
    if (value >= 1 && value <= 3 && inTransaction.readUInt32LE(at) === value + 2) candidates.push({ at, value });
  }
  // xact_start: 0 while idle; right after BEGIN it equals query_start (BEGIN started the transaction).
  const xactStartBeforeActivity =
    activityStart !== null &&
    activityStart >= 8 &&
    idle.readBigInt64LE(activityStart - 8) === 0n &&
    inTransaction.readBigInt64LE(activityStart - 8) !== 0n &&
    inTransaction.readBigInt64LE(activityStart - 8) === inTransaction.readBigInt64LE(activityStart);
  const state =
    candidates.length === 1 ? { stateOffset: candidates[0]!.at, stateIdle: candidates[0]!.value } : { stateOffset: null, stateIdle: 0 };
  return { ...state, xactStartBeforeActivity };
}

/*
 * The backend's own query id, read by a statement alone and again as the second statement of a
 * multi-statement query string: equal when the backend reports each statement's id (PostgreSQL
 * resets it per statement in current minor releases), the first statement's when it keeps that
 * one for the whole string, as older releases did. Read after stateOffset(), whose BEGIN and
 * COMMIT are the probe's last statements otherwise.
 */
async function reportsEachStatementsId(probe: pg.Client): Promise<boolean> {
  const ownId = 'SELECT query_id::text AS id FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()';
  const alone = (await probe.query<{ id: string | null }>(ownId)).rows[0]?.id ?? null;
  // A text without parameters goes out as one simple-protocol message: pg answers with one result per statement.
  // The string starts with the calibration query itself: a statement of a new shape (a bare
  // `SELECT 1`) would be the first text pg_stat_statements keeps for its id, which every
  // `SELECT <constant> AS <alias>` of the application shares (aliases are not part of the id).
  const results = (await probe.query(`${CALIBRATION_QUERY}; ${ownId}`)) as unknown as Array<pg.QueryResult<{ id: string | null }>>;
  const second = Array.isArray(results) ? (results[1]?.rows[0]?.id ?? null) : null;
  return alone !== null && second === alone;
}

/**
 * The user-id and portal globals were found by decoding code (src/postmaster/user-id-globals.ts):
 * trust them only if the idle probe backend shows there what Postgres says of it (its user, no
 * active portal). One that does not is set to 0n: BPF then keys statements by the session user
 * (as before), rather than by whatever those bytes hold.
 */
function checkStatementGlobals(target: PostmasterTarget, memory: ProcessMemory, usesysid: number): void {
  const globals = target.addresses;
  const holds = (check: () => boolean) => {
    try {
      return check();
    } catch {
      return false;
    }
  };
  if (globals.outerUserId && !holds(() => memory.readU32(globals.outerUserId) === usesysid)) globals.outerUserId = 0n;
  if (globals.currentUserId && !holds(() => memory.readU32(globals.currentUserId) === usesysid)) globals.currentUserId = 0n;
  if (globals.activePortal && !holds(() => memory.readU64(globals.activePortal) === 0n)) globals.activePortal = 0n;
}
