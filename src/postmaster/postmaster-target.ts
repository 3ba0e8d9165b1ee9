import { procPidsFor, type NamespaceId } from './pid-namespace.js';
import type { UsdtNote } from './elf-file.js';

/** Everything the collector needs to know about the Postgres it attaches to. */
export interface PostmasterTarget {
  /** Its pid as the collector's /proc shows it (/proc/<pid>/mem, maps, root). */
  pid: number;
  /** Its pid as Postgres knows it (its own pid namespace): differs from pid when the collector is on the host of a container. */
  pgPid: number;
  /** /proc shows pids as Postgres knows them (no translation): on the host, or inside the container's pid namespace. */
  procShowsPgPids: boolean;
  /** Its pid namespace (for finding its tgid as BPF sees it). */
  pidns: NamespaceId;
  /** A path the collector can open and attach uprobes to: through /proc/<pid>/root when in another mount namespace. */
  binaryPath: string;
  /** The binary's path in the postmaster's own mount namespace (as its /proc/<pid>/maps shows it). */
  mappedPath: string;
  /** Its data directory, in its own mount namespace. */
  dataDir: string;
  serverVersionNum: number;
  majorVersion: number;
  /** USDT probes of the binary (empty for builds without --enable-dtrace). */
  usdt: UsdtNote[];
  /**
   * Where one top-level statement ends: the query__execute__done site inside PortalRun (a
   * uprobe there costs one trap), or PortalRun's return for builds without USDT (a uretprobe).
   * null when the binary exports no PortalRun.
   */
  statementEnd: { kind: 'usdt-site'; fileOffset: bigint } | { kind: 'return'; symbol: string } | null;
  /**
   * File offsets of the call sites the query set also watches so that its keys and calls are
   * pg_stat_statements' for SQL-level PREPARE and EXECUTE (bpf/query.bpf.h): ExecuteQuery's call
   * of PortalDefineQuery and PrepareQuery's of StorePreparedStatement; null where not found.
   */
  preparedStatementSites: { executePlan: bigint | null; prepare: bigint | null };
  /**
   * Run-time addresses of the Postgres globals read by BPF. outerUserId, currentUserId (the user a
   * statement runs as, src/postmaster/user-id-globals.ts) and activePortal are 0n where not found:
   * statements are then keyed by the session's user.
   */
  addresses: PostgresGlobals;
  /** pg_stat_statements is preloaded (its view may still need CREATE EXTENSION). */
  pgStatStatementsLoaded: boolean;
  pgStatStatementsInstalled: boolean;
  computeQueryId: string;
  /** io_method (PostgreSQL 18: worker by default, io_uring, sync); 'sync' before 18, where backends do their own IO. */
  ioMethod: string;
}

/** Where a postmaster's children keep the globals BPF reads (run-time addresses; 0n: not found). */
export interface PostgresGlobals {
  myBEEntry: bigint;
  myWaitEventInfo: bigint;
  outerUserId: bigint;
  currentUserId: bigint;
  activePortal: bigint;
}

/** Where PgBackendStatus keeps what BPF reads, measured on a live backend (see calibrate-status-layout.ts). */
export interface StatusLayout {
  procpidOffset: number;
  backendTypeOffset: number;
  procStartOffset: number;
  dbidOffset: number;
  useridOffset: number;
  /** null when query ids are not computed (compute_query_id off): no per-query attribution. */
  queryIdOffset: number | null;
  /** The wait_event_info value of an idle backend waiting for its client (ClientRead). */
  clientReadEvent: number;
  /** st_backendType of a client backend (the enum's values differ between versions). */
  clientBackendType: number;
  /**
   * st_activity_start_timestamp (pg_stat_activity.query_start), directly followed by
   * st_state_start_timestamp (state_change); null when they were not found side by side
   * (track_activities off, or a layout where they are not adjacent): no statement latency.
   */
  activityStartOffset: number | null;
  /**
   * st_activity_raw, the pointer to the text of the backend's current (or last) statement as
   * sent (pg_stat_activity.query); null when not found (track_activities off).
   */
  activityRawOffset: number | null;
  /**
   * st_state (enum BackendState) and its value for STATE_IDLE; idle in transaction is
   * idle + 2 and idle in transaction (aborted) idle + 4 in every version. null: not found.
   */
  stateOffset: number | null;
  stateIdle: number;
  /** st_xact_start_timestamp sits right before st_activity_start_timestamp (0 outside a transaction). */
  xactStartBeforeActivity: boolean;
  /**
   * Each statement of a multi-statement query string shows its own query id while it runs, as
   * pg_stat_statements keys it (current minor releases reset the id per statement); false: the
   * first statement's id stays for the whole string, and so do the later statements' figures.
   * null: no query ids (compute_query_id off).
   */
  perStatementQueryIds: boolean | null;
}

/** The /proc pid of a process Postgres knows as `pgPid` (a child of the target's postmaster); null when gone. */
export function procPidOf(target: Pick<PostmasterTarget, 'pid' | 'procShowsPgPids'>, pgPid: number): number | null {
  if (target.procShowsPgPids) return pgPid;
  return procPidsFor(pgPid, target.pid)[0] ?? null;
}
