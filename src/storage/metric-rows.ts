import type { MapSnapshot } from '../collector/map-snapshot.js';
import type { BackendSample, QuerySample } from '../collector/map-samples.js';
import { DeltaTracker } from '../flush/delta-tracker.js';
import { toColumnValues } from '../families/metric-values.js';
import { bootTimeSeconds } from '../target/proc-stat.js';
import { BackendTypeNames } from './backend-type-names.js';
import type { BackendRow, MetricRowSet, QueryRow } from './metric-row.js';

/** Postgres timestamps count microseconds from 2000-01-01. */
const PG_EPOCH_UNIX_US = 946_684_800_000_000n;
const IDENTITY_GRACE_NS = 5_000_000_000n;
/*
 * A process without PgBackendStatus is keyed by its start time as /proc/<pid>/stat shows it
 * (boot time + start), which stays the same across flushes and collector restarts.
 */
const BOOT_TIME_UNIX_US = BigInt(bootTimeSeconds()) * 1_000_000n;

/*
 * Query keys leave the map once written and quiet: after QUIET_FLUSHES flushes without a change,
 * or after one when the map is under pressure (PRESSURE_FILL full, or a key could not be added
 * since the last flush). pg_stat_statements deallocates the same way, least used first; here the
 * cumulative row in query_stats keeps what was evicted, and a key that comes back starts again
 * from zero in the map and adds to the same row.
 */
const QUIET_FLUSHES = 3;
const PRESSURE_FILL = 0.9;
/** Evictions per flush at most (one syscall each): a full map of 8192 heals in two flushes. */
const MAX_EVICTIONS_PER_FLUSH = 4096;

export interface MetricRowsOptions {
  /** Deletes query keys from the map, returning what each held when deleted (MapReaders.evictQueries); absent: nothing is evicted. */
  evictQueries?: (rawKeys: Buffer[]) => Array<bigint[] | null>;
  /** For the one line when eviction cannot run on this kernel. */
  log?: (line: string) => void;
  /** Names backend type numbers by this version's enum when nothing was learnt (BackendTypeNames). */
  version?: { majorVersion: number; clientBackendType: number };
}

interface QueryIdentity {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
}

/** One flush's metric rows and what each table's part commits once they are written. */
export interface PreparedMetricRows extends MetricRowSet {
  /** Pids of backends excluded after a row of theirs may have been written: their open rows go. */
  retracted: number[];
  commitQueries(): void;
  commitBackends(): void;
}

/**
 * Turns the maps' cumulative figures into the increments of query_stats and backend_stats,
 * once per snapshot: the query stats, backend stats, history and health parts of a flush all
 * use the same rows.
 *
 * @example
 * const rows = new MetricRows(postmasterPid, (pids) => object.deleteBackends(pids));
 * const { queries, backends } = rows.prepare(snapshot, new Set(['cpu']));
 */
export class MetricRows {
  readonly backendTypes: BackendTypeNames;
  private readonly queryDeltas = new DeltaTracker();
  private readonly backendDeltas = new DeltaTracker();
  private readonly prepared = new WeakMap<MapSnapshot, PreparedMetricRows>();
  /** Written query keys by flushes since their last change (keys in the map only). */
  private quiet = new Map<string, number>();
  /** What evicted keys held beyond their written baseline (an increment between read and delete), written by the next flush. */
  private readonly remainders = new Map<string, { identity: QueryIdentity; delta: bigint[] }>();
  private lastQueriesFull = 0n;
  /** Pids excluded since the last flush was written (see excluded()). */
  private retracting = new Set<number>();
  /** Query keys evicted since load (bpf_stats.health.map_fill). */
  evictedQueries = 0;

  /** CLOCK_MONOTONIC to wall clock, fixed once so that derived timestamps are stable. */
  private readonly monotonicToUnixUs = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;

  constructor(
    /** The postmaster's pid as Postgres knows it; a restarted postmaster gets a new one (setPostmaster). */
    private postmasterPid: number,
    /** Forgets processes whose final figures were written (their map entries). */
    private readonly forgetBackends: (pids: number[]) => void,
    private options: MetricRowsOptions = {},
  ) {
    this.backendTypes = new BackendTypeNames(postmasterPid, options.version);
  }

  /**
   * One of the collector's own connections was excluded. Its backend existed (and may have been
   * flushed, named, baselined) from fork until its pid arrived with the connection: what was
   * kept of it goes, and the next flush deletes its open row from backend_stats.
   */
  excluded(pid: number): void {
    for (const key of this.backendDeltas.keys()) if (key.startsWith(`${pid}/`)) this.backendDeltas.forget(key);
    this.backendTypes.forget(pid);
    this.retracting.add(pid);
    // Bounded: the set empties at every written flush; a database away for long keeps the newest.
    if (this.retracting.size > 10_000) this.retracting.delete(this.retracting.values().next().value!);
  }

  /** The postmaster restarted: its row is the new pid's. */
  setPostmaster(pid: number): void {
    this.postmasterPid = pid;
    this.backendTypes.setPostmaster(pid);
  }

  /** A live backend pg_stat_activity has not named for us yet is in the snapshot (observe() it first). */
  needsNames(snapshot: MapSnapshot): boolean {
    return snapshot.backends.some((s) => s.identityKnown && s.exitedNs === 0n && !this.backendTypes.knows(s.pid));
  }

  /** The rows of `snapshot` (computed once per snapshot); `measured`: the probe sets attached since the last flush. */
  prepare(snapshot: MapSnapshot, measured: ReadonlySet<string>): PreparedMetricRows {
    let rows = this.prepared.get(snapshot);
    if (!rows) this.prepared.set(snapshot, (rows = this.compute(snapshot, measured)));
    return rows;
  }

  private compute(snapshot: MapSnapshot, measured: ReadonlySet<string>): PreparedMetricRows {
    const queryCommits: Array<() => void> = [];
    const queries: QueryRow[] = [];
    const unchanged: QuerySample[] = [];
    const changed = new Set<string>();
    const pushQuery = (identity: QueryIdentity, delta: bigint[]) =>
      queries.push({
        userid: identity.userid,
        dbid: identity.dbid,
        toplevel: identity.toplevel,
        queryid: BigInt.asIntN(64, identity.queryid).toString(),
        values: toColumnValues(delta, measured),
      });
    for (const sample of snapshot.queries) {
      const key = queryKey(sample);
      let delta = this.queryDeltas.delta(key, sample.metrics);
      const remainder = this.remainders.get(key);
      if (remainder) delta = delta.map((d, i) => d + (remainder.delta[i] ?? 0n));
      if (delta.every((d) => d === 0n)) {
        unchanged.push(sample);
        continue;
      }
      pushQuery(sample, delta);
      changed.add(key);
      queryCommits.push(() => {
        this.queryDeltas.commit(key, sample.metrics);
        this.remainders.delete(key);
      });
    }
    // What evicted keys still owed, for keys not back in the map.
    for (const [key, remainder] of this.remainders) {
      // A key back in the map had its remainder added to its delta above.
      if (changed.has(key)) continue;
      pushQuery(remainder.identity, remainder.delta);
      queryCommits.push(() => this.remainders.delete(key));
    }
    const fill = snapshot.fill.find((f) => f.map === 'queries');
    const queriesFull = snapshot.counters.queries_full ?? 0n;
    const pressure = (fill !== undefined && fill.entries >= PRESSURE_FILL * fill.maxEntries) || queriesFull > this.lastQueriesFull;
    queryCommits.push(() => {
      this.lastQueriesFull = queriesFull;
      this.evictQuiet(unchanged, changed, pressure);
    });

    const backendCommits: Array<() => void> = [];
    const backends: BackendRow[] = [];
    const exited: number[] = [];
    const samples = snapshot.backends;
    for (const sample of samples) this.backendTypes.learn(sample.pid, sample.backendType);
    for (const sample of samples) {
      const key = backendKey(sample);
      const isExited = sample.exitedNs !== 0n;
      // A new backend publishes its PgBackendStatus within milliseconds of fork; until then its
      // row key (pid, backend_start) is not final, so it waits, unless it never will have one.
      const ageNs = process.hrtime.bigint() - sample.taskStartNs;
      if (!sample.identityKnown && !isExited && ageNs < IDENTITY_GRACE_NS && sample.pid !== this.postmasterPid) continue;
      const delta = this.backendDeltas.delta(key, sample.metrics);
      if (!isExited && delta.every((d) => d === 0n) && this.backendDeltas.has(key)) continue;
      backends.push({
        pid: sample.pid,
        backendStartUs:
          sample.backendStartUs !== 0n
            ? sample.backendStartUs + PG_EPOCH_UNIX_US
            : sample.taskStartNs / 1000n + BOOT_TIME_UNIX_US,
        backendType: this.backendTypes.name(sample),
        datid: sample.identityKnown && sample.dbid ? sample.dbid : null,
        usesysid: sample.identityKnown && sample.userid ? sample.userid : null,
        queryid: sample.queryid ? BigInt.asIntN(64, sample.queryid).toString() : null,
        values: toColumnValues(delta, measured),
        exitedAtUs: isExited ? sample.exitedNs / 1000n + this.monotonicToUnixUs : null,
      });
      if (isExited) {
        exited.push(sample.key);
        backendCommits.push(() => {
          this.backendDeltas.forget(key);
          this.backendTypes.forget(sample.pid);
        });
      } else {
        backendCommits.push(() => this.backendDeltas.commit(key, sample.metrics));
      }
    }

    const retracted = [...this.retracting];
    backendCommits.push(() => retracted.forEach((pid) => this.retracting.delete(pid)));
    return {
      queries,
      backends,
      retracted,
      commitQueries: () => queryCommits.forEach((commit) => commit()),
      commitBackends: () => {
        backendCommits.forEach((commit) => commit());
        this.forgetBackends(exited);
      },
    };
  }

  /**
   * After a flush was written: counts how long each key has been quiet and evicts the quiet
   * ones. A key is deleted with what it held at that moment; anything beyond the written
   * baseline (an increment since the snapshot) is kept as a remainder for the next flush.
   */
  private evictQuiet(unchanged: QuerySample[], changed: Set<string>, pressure: boolean): void {
    const quiet = new Map<string, number>();
    for (const key of changed) quiet.set(key, 0);
    const threshold = pressure ? 1 : QUIET_FLUSHES;
    const candidates: QuerySample[] = [];
    for (const sample of unchanged) {
      const key = queryKey(sample);
      const flushes = (this.quiet.get(key) ?? 0) + 1;
      quiet.set(key, flushes);
      if (flushes >= threshold && candidates.length < MAX_EVICTIONS_PER_FLUSH) candidates.push(sample);
    }
    this.quiet = quiet;
    const evict = this.options.evictQueries;
    if (!evict || !candidates.length) return;
    let values: Array<bigint[] | null>;
    try {
      values = evict(candidates.map((s) => s.rawKey));
    } catch (error) {
      // A kernel without lookup-and-delete on per-CPU hashes (before 5.14): the map only grows again.
      this.options.log?.(`query keys cannot be evicted on this kernel, a full queries map stays full: ${error instanceof Error ? error.message : String(error)}`);
      this.options = { ...this.options, evictQueries: undefined };
      return;
    }
    candidates.forEach((sample, i) => {
      const key = queryKey(sample);
      const value = values[i];
      this.quiet.delete(key);
      if (!value) return;
      this.evictedQueries++;
      const delta = this.queryDeltas.delta(key, value);
      this.queryDeltas.forget(key);
      if (delta.some((d) => d !== 0n)) this.remainders.set(key, { identity: { userid: sample.userid, dbid: sample.dbid, toplevel: sample.toplevel, queryid: sample.queryid }, delta });
    });
  }
}

function queryKey(s: QueryIdentity): string {
  return `${s.userid}/${s.dbid}/${s.toplevel ? 1 : 0}/${s.queryid}`;
}

function backendKey(s: BackendSample): string {
  return `${s.pid}/${s.taskStartNs}`;
}
