import type { MapSnapshot } from '../collector/map-snapshot.js';
import type { BackendSample, QuerySample } from '../collector/map-samples.js';
import { DeltaTracker } from '../flush/delta-tracker.js';
import { toColumnValues } from '../families/metric-values.js';
import { bootTimeSeconds } from '../target/proc-stat.js';
import { CgroupPaths } from '../instance/cgroup-paths.js';
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

/** One flush's metric rows and what each table's part commits once they are written. */
export interface PreparedMetricRows extends MetricRowSet {
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
  private readonly cgroups = CgroupPaths.forThisHost();

  /** CLOCK_MONOTONIC to wall clock, fixed once so that derived timestamps are stable. */
  private readonly monotonicToUnixUs = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;

  constructor(
    /** The postmaster's pid as Postgres knows it; a restarted postmaster gets a new one (setPostmaster). */
    private postmasterPid: number,
    /** Forgets processes whose final figures were written (their map entries). */
    private readonly forgetBackends: (pids: number[]) => void,
  ) {
    this.backendTypes = new BackendTypeNames(postmasterPid);
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
    for (const sample of snapshot.queries) {
      const key = queryKey(sample);
      const delta = this.queryDeltas.delta(key, sample.metrics);
      if (delta.every((d) => d === 0n)) continue;
      queries.push({
        userid: sample.userid,
        dbid: sample.dbid,
        toplevel: sample.toplevel,
        queryid: BigInt.asIntN(64, sample.queryid).toString(),
        values: toColumnValues(delta, measured),
      });
      queryCommits.push(() => this.queryDeltas.commit(key, sample.metrics));
    }

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
        cgroup: this.cgroups.pathOf(sample.memoryCgroup),
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

    return {
      queries,
      backends,
      commitQueries: () => queryCommits.forEach((commit) => commit()),
      commitBackends: () => {
        backendCommits.forEach((commit) => commit());
        this.forgetBackends(exited);
      },
    };
  }
}

function queryKey(s: QuerySample): string {
  return `${s.userid}/${s.dbid}/${s.toplevel ? 1 : 0}/${s.queryid}`;
}

function backendKey(s: BackendSample): string {
  return `${s.pid}/${s.taskStartNs}`;
}
