import { readlinkSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import type pg from 'pg';
import { UserError } from '../errors.js';
import { ElfFile } from './elf-file.js';
import { findCallSite } from './find-call-site.js';
import type { PostgresGlobals, PostmasterTarget } from './postmaster-target.js';
import { runtimeAddress, runtimeAddressOf } from './process-memory.js';
import { userIdGlobals } from './user-id-globals.js';
import { bootTimeSeconds, CLOCK_TICKS, procStat } from './proc-stat.js';
import { namespaceOf, nsPids, pgPidOf, procPidsFor, sameMountNamespace, type NamespaceId } from './pid-namespace.js';

/** Symbols every supported Postgres (14+) exports, with or without USDT. */
export const REQUIRED_SYMBOLS = ['MyBEEntry', 'my_wait_event_info'] as const;

/**
 * Finds the postmaster behind a connection: the connection's backend is a process on this
 * host (same pid and start time as Postgres reports, or, for a server in a container, the host
 * process whose innermost pid that is), and its parent is the postmaster.
 *
 * @example
 * const target = await discoverPostmaster(client);
 * console.log(target.pid, target.binaryPath, target.usdt.length > 0);
 */
export async function discoverPostmaster(client: pg.Client): Promise<PostmasterTarget> {
  const { rows } = await client.query<{
    pid: number;
    version_num: string;
    start_epoch: string;
    compute_query_id: string;
    preload: string;
    pgss: boolean;
    io_method: string;
  }>(`SELECT pg_backend_pid() AS pid,
             current_setting('server_version_num') AS version_num,
             extract(epoch FROM a.backend_start)::text AS start_epoch,
             coalesce(current_setting('compute_query_id', true), 'off') AS compute_query_id,
             current_setting('shared_preload_libraries') AS preload,
             EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') AS pgss,
             coalesce(current_setting('io_method', true), 'sync') AS io_method
        FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()`);
  const row = rows[0];
  if (!row) throw new UserError('postmaster not found: pg_stat_activity does not show our own backend');
  const serverVersionNum = Number(row.version_num);
  if (serverVersionNum < 140000) {
    throw new UserError(`PostgreSQL ${serverVersionNum} is not supported: pg-bpf-stats needs 14 or newer (query ids in core)`);
  }

  // Our backend as /proc shows it: the same pid when /proc is Postgres' pid namespace (on the
  // host, or a collector inside the container's namespace); else the host process whose
  // innermost pid (NSpid) is ours and which started when Postgres says it did.
  const startEpoch = Number(row.start_epoch);
  const startedThen = (pid: number) => {
    const stat = procStat(pid);
    return stat !== null && Math.abs(bootTimeSeconds() + stat.startTicks / CLOCK_TICKS - startEpoch) <= 2;
  };
  let backendProcPid: number | undefined;
  let procShowsPgPids = true;
  if (startedThen(row.pid) && (nsPids(row.pid)?.length ?? 1) === 1) backendProcPid = row.pid;
  else {
    procShowsPgPids = false;
    const candidates = procPidsFor(row.pid).filter(startedThen);
    if (candidates.length > 1) {
      throw new UserError(
        `postmaster not found: backend pid ${row.pid} of this connection matches ${candidates.length} processes in other pid namespaces (${candidates.join(', ')}), started at the same time: cannot tell which`,
      );
    }
    backendProcPid = candidates[0];
  }
  if (backendProcPid === undefined) {
    throw new UserError(
      `postmaster not found: backend pid ${row.pid} of this connection is not a PostgreSQL process on this host, nor in a pid namespace this host can see (is the server remote?)`,
    );
  }

  const pid = procStat(backendProcPid)!.ppid;
  let mappedPath: string;
  let dataDir: string;
  try {
    mappedPath = readlinkSync(`/proc/${pid}/exe`);
    dataDir = readlinkSync(`/proc/${pid}/cwd`);
  } catch (error) {
    throw new UserError(`postmaster ${pid} is not readable: ${(error as Error).message} (needs CAP_SYS_PTRACE for another user's process)`);
  }
  // In another mount namespace (a container) the binary is reached through the postmaster's
  // root: ELF reads, USDT notes and uprobes (the kernel resolves the path once, at attach).
  const binaryPath = sameMountNamespace(pid) ? mappedPath : `/proc/${pid}/root${mappedPath}`;
  // stat, not existsSync: access(2) checks with the real uid and, for a non-root one, without
  // capabilities, so a non-root collector with CAP_SYS_PTRACE (ambient, as podman gives a
  // container's user) was refused the binary under /proc/<pid>/root of another container.
  if (!['postgres', 'postmaster'].includes(basename(mappedPath)) || !isReachable(binaryPath)) {
    throw new UserError(`postmaster not found: the parent of backend ${row.pid} is ${mappedPath}, not a postgres binary`);
  }
  const pgPid = procShowsPgPids ? pid : pgPidOf(pid);
  if (!pgPid) throw new UserError(`postmaster ${pid} vanished while it was being found`);
  let pidns: NamespaceId;
  try {
    pidns = namespaceOf(pid, 'pid');
  } catch (error) {
    throw new UserError(`cannot read the pid namespace of postmaster ${pid}: ${(error as Error).message} (needs CAP_SYS_PTRACE)`);
  }

  const elf = ElfFile.read(binaryPath);
  const missing = REQUIRED_SYMBOLS.filter((name) => !elf.symbol(name));
  if (missing.length) {
    throw new UserError(`${binaryPath} does not export ${missing.join(', ')}: cannot attribute time to queries`);
  }

  return {
    pid,
    pgPid,
    procShowsPgPids,
    pidns,
    binaryPath,
    mappedPath,
    dataDir,
    serverVersionNum,
    majorVersion: Math.floor(serverVersionNum / 10000),
    usdt: elf.usdtNotes(),
    statementEnd: findStatementEnd(elf),
    preparedStatementSites: {
      executePlan: findCallSite(elf, 'ExecuteQuery', 'PortalDefineQuery'),
      prepare: findCallSite(elf, 'PrepareQuery', 'StorePreparedStatement'),
    },
    addresses: postgresGlobals(pid, mappedPath, elf),
    pgStatStatementsLoaded: row.preload
      .split(',')
      .map((s) => s.trim())
      .includes('pg_stat_statements'),
    pgStatStatementsInstalled: row.pgss,
    computeQueryId: row.compute_query_id,
    ioMethod: row.io_method,
  };
}

/** The run-time addresses of the globals BPF reads in `pid`'s children (see PostgresGlobals). */
export function postgresGlobals(pid: number, mappedPath: string, elf: ElfFile): PostgresGlobals {
  const users = userIdGlobals(elf);
  const at = (linkTime: bigint | null) => (linkTime === null ? 0n : runtimeAddressOf(pid, mappedPath, elf, linkTime));
  return {
    myBEEntry: runtimeAddress(pid, mappedPath, elf, 'MyBEEntry'),
    myWaitEventInfo: runtimeAddress(pid, mappedPath, elf, 'my_wait_event_info'),
    outerUserId: at(users.outerUserId),
    currentUserId: at(users.currentUserId),
    activePortal: at(elf.symbol('ActivePortal')?.value ?? null),
  };
}

/*
 * query__execute__done has two sites in PortalRun's file: PortalRun's own and one in the
 * multi-statement path it calls, so attaching by probe name counts an UPDATE twice. Only the
 * site inside PortalRun marks the end of one top-level statement.
 */
function findStatementEnd(elf: ElfFile): PostmasterTarget['statementEnd'] {
  const portalRun = elf.symbol('PortalRun');
  if (!portalRun) return null;
  const inPortalRun = (pc: bigint) => pc >= portalRun.value && pc < portalRun.value + portalRun.size;
  const site = elf.usdtNotes().find((n) => n.provider === 'postgresql' && n.name === 'query__execute__done' && inPortalRun(n.pc));
  return site ? { kind: 'usdt-site', fileOffset: elf.fileOffset(site.pc) } : { kind: 'return', symbol: 'PortalRun' };
}

function isReachable(path: string): boolean {
  try {
    return statSync(path, { throwIfNoEntry: false }) !== undefined;
  } catch {
    return false;
  }
}
