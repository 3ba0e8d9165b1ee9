import { existsSync, readlinkSync } from 'node:fs';
import { basename } from 'node:path';
import type pg from 'pg';
import { UserError } from '../errors.js';
import { ElfFile } from './elf-file.js';
import type { PostmasterTarget } from './postmaster-target.js';
import { runtimeAddress } from './process-memory.js';
import { bootTimeSeconds, CLOCK_TICKS, procStat } from './proc-stat.js';

/** Symbols every supported Postgres (14+) exports, with or without USDT. */
export const REQUIRED_SYMBOLS = ['MyBEEntry', 'my_wait_event_info'] as const;


/**
 * Finds the postmaster behind a connection: the connection's backend is a process on this
 * host (same pid and start time as Postgres reports), and its parent is the postmaster.
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
  }>(`SELECT pg_backend_pid() AS pid,
             current_setting('server_version_num') AS version_num,
             extract(epoch FROM a.backend_start)::text AS start_epoch,
             coalesce(current_setting('compute_query_id', true), 'off') AS compute_query_id,
             current_setting('shared_preload_libraries') AS preload,
             EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') AS pgss
        FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()`);
  const row = rows[0];
  if (!row) throw new UserError('postmaster not found: pg_stat_activity does not show our own backend');
  const serverVersionNum = Number(row.version_num);
  if (serverVersionNum < 140000) {
    throw new UserError(`PostgreSQL ${serverVersionNum} is not supported: pg-bpf-stats needs 14 or newer (query ids in core)`);
  }

  const backend = procStat(row.pid);
  const elsewhere = `postmaster not found: backend pid ${row.pid} of this connection is not a PostgreSQL process on this host (is the server remote, or in another pid namespace?)`;
  if (!backend) throw new UserError(elsewhere);
  const startedAt = bootTimeSeconds() + backend.startTicks / CLOCK_TICKS;
  if (Math.abs(startedAt - Number(row.start_epoch)) > 2) throw new UserError(elsewhere);

  const pid = backend.ppid;
  let binaryPath: string;
  let dataDir: string;
  try {
    binaryPath = readlinkSync(`/proc/${pid}/exe`);
    dataDir = readlinkSync(`/proc/${pid}/cwd`);
  } catch (error) {
    throw new UserError(`postmaster ${pid} is not readable: ${(error as Error).message} (needs CAP_SYS_PTRACE for another user's process)`);
  }
  if (!['postgres', 'postmaster'].includes(basename(binaryPath)) || !existsSync(binaryPath)) {
    throw new UserError(`postmaster not found: the parent of backend ${row.pid} is ${binaryPath}, not a postgres binary`);
  }

  const elf = ElfFile.read(binaryPath);
  const missing = REQUIRED_SYMBOLS.filter((name) => !elf.symbol(name));
  if (missing.length) {
    throw new UserError(`${binaryPath} does not export ${missing.join(', ')}: cannot attribute time to queries`);
  }

  return {
    pid,
    binaryPath,
    dataDir,
    serverVersionNum,
    majorVersion: Math.floor(serverVersionNum / 10000),
    usdt: elf.usdtNotes(),
    statementEnd: findStatementEnd(elf),
    addresses: {
      myBEEntry: runtimeAddress(pid, binaryPath, elf, 'MyBEEntry'),
      myWaitEventInfo: runtimeAddress(pid, binaryPath, elf, 'my_wait_event_info'),
    },
    pgStatStatementsLoaded: row.preload.split(',').map((s) => s.trim()).includes('pg_stat_statements'),
    pgStatStatementsInstalled: row.pgss,
    computeQueryId: row.compute_query_id,
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
  const site = elf
    .usdtNotes()
    .find((n) => n.provider === 'postgresql' && n.name === 'query__execute__done' && elf.functionAt(n.pc)?.name === 'PortalRun');
  return site ? { kind: 'usdt-site', fileOffset: elf.fileOffset(site.pc) } : { kind: 'return', symbol: 'PortalRun' };
}
