/**
 * Names backends the way pg_stat_activity.backend_type does. BPF only sees the numeric
 * st_backendType, whose numbering differs between major versions, so the names are learnt
 * from live backends (pid → name from pg_stat_activity, pid → number from BPF); a process
 * that exited unseen is named by its number when that number has only ever had one name.
 *
 * @example
 * const names = new BackendTypeNames(postmasterPid);
 * names.observe(1234, 'client backend');
 * names.name({ pid: 1234, backendType: 3, identityKnown: true });
 */
export class BackendTypeNames {
  private readonly byPid = new Map<number, string>();
  /** backend_start as pg_stat_activity showed it for a live pid, µs since the Unix epoch. */
  private readonly startByPid = new Map<number, bigint>();
  private readonly byNumber = new Map<number, Set<string>>();
  /** Postgres' own numbering for this major version, when it agrees with the calibrated client backend number. */
  private readonly enumNames: readonly string[] | null;

  constructor(
    private postmasterPid: number,
    /** The major version, and st_backendType of a client backend as calibration read it (src/postmaster/). */
    version?: { majorVersion: number; clientBackendType: number },
  ) {
    const names = version ? BACKEND_TYPE_ENUM[version.majorVersion] : undefined;
    // A build that numbers differently (a fork, a version not listed) falls back to what is learnt.
    this.enumNames = names && version && names[version.clientBackendType] === 'client backend' ? names : null;
  }

  /** The postmaster restarted (its old pid's row stays 'postmaster' only through what was written). */
  setPostmaster(pid: number): void {
    this.postmasterPid = pid;
  }

  /** Remember what pg_stat_activity says a live pid is, and since when (µs since the Unix epoch; null when it shows none). */
  observe(pid: number, name: string, startUs: bigint | null = null): void {
    this.byPid.set(pid, name);
    if (startUs === null) this.startByPid.delete(pid);
    else this.startByPid.set(pid, startUs);
  }

  /**
   * The backend_start pg_stat_activity showed for `pid`: the row key of a process whose own
   * PgBackendStatus BPF has not read yet (it reads it only from the process's switch-outs).
   */
  startUs(pid: number): bigint | undefined {
    return this.startByPid.get(pid);
  }

  knows(pid: number): boolean {
    return this.byPid.has(pid);
  }

  /** Tie a pid's learnt name to the number BPF read for it. */
  learn(pid: number, backendType: number): void {
    const name = this.byPid.get(pid);
    if (name === undefined || backendType < 0) return;
    let names = this.byNumber.get(backendType);
    if (!names) this.byNumber.set(backendType, (names = new Set()));
    names.add(name);
  }

  name(sample: { pid: number; backendType: number; identityKnown: boolean }): string {
    if (sample.pid === this.postmasterPid) return 'postmaster';
    const live = this.byPid.get(sample.pid);
    if (live !== undefined) return live;
    if (!sample.identityKnown) return 'postmaster child';
    // A process too short-lived for pg_stat_activity to show (pgbench -C, autovacuum workers,
    // parallel workers): Postgres' BackendType enum of this version, as pg_stat_activity names
    // its members. Before what was learnt: one background worker kind seen alive (the logical
    // replication launcher) named every unseen parallel worker after it.
    const known = this.enumNames?.[sample.backendType];
    if (known) return known;
    const names = this.byNumber.get(sample.backendType);
    if (names?.size === 1) return [...names][0]!;
    if (names && names.size > 1) return 'background worker';
    return `backend type ${sample.backendType}`;
  }

  /** Drop pids that are gone, keeping memory bounded by the live process count. */
  forget(pid: number): void {
    this.byPid.delete(pid);
    this.startByPid.delete(pid);
  }
}

/*
 * BackendType (src/include/miscadmin.h) by major version, index = enum value, each member named
 * as GetBackendTypeDesc() names it in pg_stat_activity.backend_type.
 */
const PG14_15_PREFIX = [
  '',
  'autovacuum launcher',
  'autovacuum worker',
  'client backend',
  'background worker',
  'background writer',
  'checkpointer',
  'startup',
  'walreceiver',
  'walsender',
  'walwriter',
  'archiver',
];
const PG17 = [
  '',
  'client backend',
  'autovacuum launcher',
  'autovacuum worker',
  'background worker',
  'walsender',
  'slotsync worker',
  'standalone backend',
  'archiver',
  'background writer',
  'checkpointer',
  'startup',
  'walreceiver',
  'walsummarizer',
  'walwriter',
  'logger',
];
const BACKEND_TYPE_ENUM: Readonly<Record<number, readonly string[]>> = {
  14: [...PG14_15_PREFIX, 'stats collector', 'logger'],
  15: [...PG14_15_PREFIX, 'logger'],
  16: [
    '',
    'archiver',
    'autovacuum launcher',
    'autovacuum worker',
    'client backend',
    'background worker',
    'background writer',
    'checkpointer',
    'logger',
    'standalone backend',
    'startup',
    'walreceiver',
    'walsender',
    'walwriter',
  ],
  17: PG17,
  18: [
    '',
    'client backend',
    'dead-end client backend',
    'autovacuum launcher',
    'autovacuum worker',
    'background worker',
    'walsender',
    'slotsync worker',
    'standalone backend',
    'archiver',
    'background writer',
    'checkpointer',
    'io worker',
    'startup',
    'walreceiver',
    'walsummarizer',
    'walwriter',
    'syslogger',
  ],
};

/** Postgres' own name of BackendType member `backendType` in `majorVersion` (PostgreSQL 14-18), as pg_stat_activity shows it; undefined when not known. */
export function backendTypeEnumName(majorVersion: number, backendType: number): string | undefined {
  return BACKEND_TYPE_ENUM[majorVersion]?.[backendType] || undefined;
}
