import type { MapSnapshot } from '../collector/map-snapshot.js';
import { queryIdentityKey, type BackendRecordRef, type BackendSample, type QuerySample } from '../collector/map-samples.js';
import { DeltaTracker } from '../deltas/delta-tracker.js';
import { addExact, isZero, type ExactInt } from '../exact-int.js';
import { columnValuesFor, type MetricValue } from '../families/metric-values.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { bootTimeSeconds } from '../postmaster/proc-stat.js';
import { CgroupPaths } from '../postmaster/cgroup-paths.js';
import { BackendTypeNames } from '../postmaster/backend-type-names.js';
import { RowBacklog } from './row-backlog.js';
import { HeldKeys, MAX_EVICTIONS_PER_FLUSH, PRESSURE_FILL, QUIET_FLUSHES } from '../deltas/held-keys.js';
import { MapEviction } from '../deltas/map-eviction.js';
import type { BackendRow, MetricRowSet, QueryRow } from '../storage/metric-row.js';
import { PG_EPOCH_UNIX_US } from '../postgres-timestamp.js';
import { MAX_ROWS_PER_TABLE } from '../families/flush-part.js';

const IDENTITY_GRACE_NS = 5_000_000_000n;
/**
 * A process's backend_start (set in the child just after fork) and its task's start differ by
 * milliseconds; more than this and pg_stat_activity's row is another process's (a pid reused).
 */
const SAME_START_US = 2_000_000n;
/**
 * Busy time of the changed backend rows, as a share of the time since backend rows were last
 * written, below which they can wait for a lazy flush: 1% of one CPU. (Run-queue waits are not
 * counted: on a loaded host even a napping process waits for a CPU each time it wakes.)
 */
const QUIET_BUSY_PERCENT = 1n;
/** ... and below which they wait whatever the share (a fork or a checkpoint's few ms right after a write). */
const QUIET_BUSY_MIN_NS = 10_000_000n;
/** The members of struct metrics that say a process was busy (not asleep). */
const BUSY_FIELDS = new Set([
  'on_cpu_ns',
  'io_wait_ns',
  'lock_wait_ns',
  'lwlock_wait_ns',
  'reclaim_ns',
  'compaction_ns',
  'writeback_throttle_ns',
]);
const BUSY_INDEXES = METRIC_COLUMNS.flatMap((c, i) => (BUSY_FIELDS.has(c.field) ? [i] : []));
/*
 * A process without PgBackendStatus is keyed by its start time as /proc/<pid>/stat shows it
 * (boot time + start), which stays the same across flushes and collector restarts.
 */
const BOOT_TIME_UNIX_US = BigInt(bootTimeSeconds()) * 1_000_000n;

/**
 * An excluded backend whose record was not found at its exclusion (it had already been written
 * and forgotten): it started at most this long before, as a connection takes to open.
 */
const UNSEEN_START_WINDOW_NS = 10_000_000_000n;
/** Rows' backend_start is Postgres' clock, or task start + boot time in whole seconds: this much either side. */
const ROW_START_SLACK_US = 2_000_000n;
const MIN_ROWS_PER_TABLE = 128;

export interface MetricRowsOptions {
  /** Deletes query keys from the map, returning what each held when deleted (MapReaders.evictQueries); absent: nothing is evicted. */
  evictQueries?: (rawKeys: Buffer[]) => Array<ExactInt[] | null>;
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

/** A backend row a flush may write, from `sample`; `record`: where an exited process's entry is, freed once written. */
interface BackendCandidate {
  key: string;
  row: BackendRow;
  sample: BackendSample;
  record: BackendRecordRef | null;
}

/** A query row a flush may write: its delta, and the map's figures that become its baseline once written (null: an evicted key's remainder). */
interface QueryCandidate {
  key: string;
  identity: QueryIdentity;
  delta: ExactInt[];
  metrics: ExactInt[] | null;
}

/**
 * One of the collector's own backends, excluded once its pid arrived with its connection: the
 * process that had `pid` (as Postgres knows it) and started (task_start_ns, CLOCK_MONOTONIC)
 * between fromNs and toNs. Its rows in backend_stats are those with that pid and a
 * backend_start (microseconds since the Unix epoch) between fromUs and toUs.
 */
export interface Retraction {
  pid: number;
  fromNs: bigint;
  toNs: bigint;
  fromUs: bigint;
  toUs: bigint;
}

/** One flush's metric rows and what each table's part commits once they are written. */
export interface PreparedMetricRows extends MetricRowSet {
  /** Changed rows left in the maps for a later flush by the row budget (MAX_ROWS_PER_TABLE). */
  deferred: number;
  /** Rows per table this flush may write (the row budget): halved after each flush that was not written. */
  rowsPerTable: number;
  /** The collector's own backends excluded after a row of theirs may have been written: those rows go. */
  retracted: Retraction[];
  /**
   * Whether the backend rows should go out now: a process is new or exited, or the processes
   * together were busy (on CPU, or waiting on IO, locks, reclaim) for 10 ms or more, and for 1%
   * of a CPU or more since backend rows were last written.
   * Otherwise they are idle background processes waking on their timers (the bgwriter's
   * 200 ms naps), which a lazy flush lets accumulate in BPF until something else is written.
   */
  backendsUrgent: boolean;
  commitQueries(): void;
  commitBackends(): void;
}

/**
 * Turns the maps' cumulative figures into the increments of query_stats and backend_stats,
 * once per snapshot: the query stats, backend stats, history and health parts of a flush all
 * use the same rows.
 *
 * @example
 * const rows = new MetricRows(postmasterPid, (records) => object.deleteBackends(records));
 * const { queries, backends } = rows.prepare(snapshot, new Set(['cpu']));
 */
export class MetricRows {
  readonly backendTypes: BackendTypeNames;
  private readonly queryDeltas = new DeltaTracker();
  private readonly backendDeltas = new DeltaTracker();
  private readonly prepared = new WeakMap<MapSnapshot, PreparedMetricRows>();
  private readonly cgroups = CgroupPaths.forThisHost();
  /** The keys in the map, least recently changed first (for evicting the quiet ones). */
  private readonly held = new HeldKeys<QuerySample>();
  /** What evicted keys held beyond their written baseline (an increment between read and delete), written by the next flush. */
  private readonly remainders = new Map<string, { identity: QueryIdentity; delta: ExactInt[] }>();
  /** Overflow slots already owed in remainders. */
  private readonly overflowMerged = new WeakSet<object>();
  /** queries_full + map_no_memory + role_quota + query_key_held as the last written flush read them. */
  private lastRefusals = 0n;
  /** The collector's own backends whose figures may still be in a snapshot or a written row (see excluded()). */
  private retracting: Retraction[] = [];
  /** Rows the last prepared flush left for later by the budget. */
  private lastDeferred = 0;
  /** Rows per table the next flush may write (MAX_ROWS_PER_TABLE). */
  private rowBudget = MAX_ROWS_PER_TABLE;
  /** The last prepared rows were not written (yet). */
  private unwritten = false;
  /** Rows left out by the budget, written first by the next flushes (one per table). */
  private readonly queryBacklog = new RowBacklog();
  private readonly backendBacklog = new RowBacklog();
  /** Deletes quiet query keys (off without evictQueries, or once the kernel refused it). */
  private readonly queryEviction: MapEviction<ExactInt[]>;
  /** Query keys evicted since load (bpf_stats.health.map_fill). */
  evictedQueries = 0;
  /** Live processes without an identity (backendKey) pg_stat_activity was read for (needsNames). */
  private statActivityAsked = new Set<string>();
  /** process.hrtime of the last written backend rows. */
  private backendsWrittenNs = process.hrtime.bigint();
  /** Of the last prepared rows: busy time not written yet, and backends left to wait for their identity. */
  private waiting = { busyNs: 0n, identities: 0 };

  /** CLOCK_MONOTONIC to wall clock, fixed once so that derived timestamps are stable. */
  private readonly monotonicToUnixUs = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;

  constructor(
    /** The postmaster's pid as Postgres knows it; a restarted postmaster gets a new one (setPostmaster). */
    private postmasterPid: number,
    /** Forgets processes whose final figures were written (their map entries). */
    private readonly forgetBackends: (records: BackendRecordRef[]) => void,
    options: MetricRowsOptions = {},
  ) {
    this.backendTypes = new BackendTypeNames(postmasterPid, options.version);
    this.queryEviction = new MapEviction('queries', options.evictQueries, options.log);
  }

  /**
   * One of the collector's own connections was excluded. Its backend existed (and may have been
   * read, named, baselined, written) from fork until its pid arrived with the connection, and a
   * snapshot read before that may be written after it. So, whatever the order: no snapshot's
   * record of that process is written from now on (prepare() leaves it out and deletes it from
   * the map), what was kept of it goes, and its rows already in backend_stats are deleted by the
   * next written flush. Kept until a flush written from a snapshot read after the exclusion
   * found no record of it. `starts`: task_start_ns of its records the exclusion dropped
   * (CollectorObject.exclude()).
   */
  excluded(pid: number, starts: readonly bigint[] = []): void {
    const toNs = process.hrtime.bigint();
    // biome-ignore lint/complexity/useMathMinMax: bigints, which Math.min does not take
    const fromNs = starts.length ? starts.reduce((a, b) => (b < a ? b : a)) : toNs - UNSEEN_START_WINDOW_NS;
    const nowUs = BigInt(Date.now()) * 1000n;
    const retraction: Retraction = {
      pid,
      fromNs,
      toNs,
      fromUs: nowUs - (toNs - fromNs) / 1000n - ROW_START_SLACK_US,
      toUs: nowUs + ROW_START_SLACK_US,
    };
    for (const key of this.backendDeltas.keys()) {
      const [keyPid, start = ''] = key.split('/');
      if (Number(keyPid) === pid && /^\d+$/.test(start) && matches(retraction, pid, BigInt(start))) this.backendDeltas.forget(key);
    }
    this.backendTypes.forget(pid);
    this.retracting.push(retraction);
    // Bounded: entries go within a flush or two; a database away for long keeps the newest.
    if (this.retracting.length > 10_000) this.retracting.shift();
  }

  /**
   * Whether the last prepared rows, once committed, left nothing that a later flush writes by
   * itself, and `busyNsSinceRead` more busy time (noted by BPF since that snapshot) would still
   * let the backend rows wait: then a flush now would write nothing (IdleGate). Not so while
   * rows wait for the budget, for an identity or for a retraction, remainders of evicted keys
   * are owed, or written keys wait to be evicted as quiet.
   */
  wouldWriteNothing(busyNsSinceRead: bigint): boolean {
    if (this.unwritten || this.lastDeferred || this.waiting.identities || this.retracting.length || this.remainders.size) return false;
    if (this.held.size && this.queryEviction.enabled) return false;
    return !this.busyEnough(this.waiting.busyNs + busyNsSinceRead);
  }

  /** The busy rule (backendsUrgent): 10 ms or more, and 1% of a CPU or more since backend rows were last written. */
  private busyEnough(busyNs: bigint): boolean {
    return busyNs >= QUIET_BUSY_MIN_NS && busyNs * 100n >= QUIET_BUSY_PERCENT * (process.hrtime.bigint() - this.backendsWrittenNs);
  }

  /** The postmaster restarted: its row is the new pid's. */
  setPostmaster(pid: number): void {
    this.postmasterPid = pid;
    this.backendTypes.setPostmaster(pid);
  }

  /**
   * pg_stat_activity is to be read before this snapshot's rows (observeStatActivity): a live backend
   * it has not named for us yet is in it, or a live process whose PgBackendStatus BPF has not
   * read, whose row key (pid, backend_start) it would give. The latter asked once each.
   */
  needsNames(snapshot: MapSnapshot): boolean {
    const nowNs = process.hrtime.bigint();
    return snapshot.backends.some((s) =>
      s.identityKnown
        ? s.exitedNs === 0n && !this.backendTypes.knows(s.pid)
        : this.writtenWithoutIdentity(s, nowNs) && !this.statActivityAsked.has(backendKey(s)),
    );
  }

  /** What pg_stat_activity showed, read because needsNames(snapshot) said so. */
  observeStatActivity(
    snapshot: MapSnapshot,
    activity: ReadonlyArray<{ pid: number; backendType: string; backendStartUs: bigint | null }>,
  ): void {
    for (const row of activity) this.backendTypes.observe(row.pid, row.backendType, row.backendStartUs);
    // Bounded by the live processes: those that have their identity by now leave the set.
    const nowNs = process.hrtime.bigint();
    this.statActivityAsked = new Set(snapshot.backends.filter((s) => this.writtenWithoutIdentity(s, nowNs)).map(backendKey));
  }

  /** A live process without an identity that is written as it is (past the grace), keyed by rowStartUs(). */
  private writtenWithoutIdentity(s: BackendSample, nowNs: bigint): boolean {
    return this.missingIdentity(s, nowNs) === 'past grace';
  }

  /**
   * A live process (not the postmaster) whose PgBackendStatus BPF has not read yet: its row waits
   * for it during the grace (a new backend publishes it within milliseconds of fork), and is
   * written as it is after. null: it has its identity, or never will (exited, the postmaster).
   */
  private missingIdentity(s: BackendSample, nowNs: bigint): 'in grace' | 'past grace' | null {
    if (s.identityKnown || s.exitedNs !== 0n || s.pid === this.postmasterPid) return null;
    return nowNs - s.taskStartNs < IDENTITY_GRACE_NS ? 'in grace' : 'past grace';
  }

  /**
   * The backend_stats row (pid, backend_start in µs since the Unix epoch) `sample` is written as,
   * for a family's per-backend rows (src/families/waits/); null while that is not final (its
   * identity is awaited, as its own row waits).
   */
  backendRowKey(sample: BackendSample): { pid: number; backendStartUs: bigint } | null {
    if (this.missingIdentity(sample, process.hrtime.bigint()) === 'in grace') return null;
    return { pid: sample.pid, backendStartUs: this.rowStartUs(sample) };
  }

  /** The rows of `snapshot` (computed once per snapshot); `measured`: the probe sets attached since the last flush. */
  prepare(snapshot: MapSnapshot, measured: ReadonlySet<string>): PreparedMetricRows {
    let rows = this.prepared.get(snapshot);
    if (!rows) this.prepared.set(snapshot, (rows = this.compute(snapshot, measured)));
    return rows;
  }

  private compute(snapshot: MapSnapshot, measured: ReadonlySet<string>): PreparedMetricRows {
    // The maps were read before this: every cgroup id in them existed by now.
    const readByMs = performance.now();
    if (this.unwritten) this.rowBudget = Math.max(MIN_ROWS_PER_TABLE, this.rowBudget >> 1);
    this.unwritten = true;
    const budget = this.rowBudget;
    const toColumnValues = columnValuesFor(measured);
    const { queries, queryCommits, queriesDeferred } = this.prepareQueryRows(snapshot, budget, toColumnValues);
    const { backends, backendCommits, backendsDeferred, exited, busy, identities, backendsUrgent, retracted, ownRecords } =
      this.prepareBackendRows(snapshot, budget, toColumnValues, readByMs);
    const deferred = queriesDeferred + backendsDeferred;
    const busyNs = BigInt(busy);
    this.waiting = { busyNs, identities };
    this.lastDeferred = deferred;
    let wasWritten = false;
    const written = () => {
      if (wasWritten) return;
      wasWritten = true;
      this.unwritten = false;
      this.rowBudget = Math.min(MAX_ROWS_PER_TABLE, this.rowBudget * 2);
    };
    return {
      queries,
      backends,
      retracted,
      deferred,
      rowsPerTable: budget,
      backendsUrgent: backendsUrgent || ownRecords.length > 0 || this.busyEnough(busyNs),
      commitQueries: () => {
        written();
        for (const commit of queryCommits) commit();
      },
      commitBackends: () => {
        written();
        if (backends.length) {
          this.backendsWrittenNs = process.hrtime.bigint();
          this.waiting = { ...this.waiting, busyNs: 0n };
        }
        for (const commit of backendCommits) commit();
        this.forgetBackends(exited);
      },
    };
  }

  /**
   * The query rows of a snapshot, at most `budget`: each key's delta since its figures were last
   * written, with what evicted or refused keys still owe; and what to commit once written.
   */
  private prepareQueryRows(snapshot: MapSnapshot, budget: number, toColumnValues: (delta: readonly ExactInt[]) => MetricValue[]) {
    const queryCommits: Array<() => void> = [];
    const queries: QueryRow[] = [];
    const changed = new Set<string>();
    // Plain records, committed in one loop: a full map makes 4,096 of them a flush.
    const queryCandidates: QueryCandidate[] = [];
    // Figures of keys the map refused (overflow slots, taken by the read): owed like an evicted
    // key's remainder, added to the key's delta when it is in the map, else a row of their own.
    for (const taken of snapshot.overflow) {
      // (Two snapshots can carry one slot when the first was not prepared before the second was read.)
      if (this.overflowMerged.has(taken)) continue;
      this.overflowMerged.add(taken);
      const key = queryIdentityKey(taken);
      const owed = this.remainders.get(key);
      this.remainders.set(key, {
        identity: { userid: taken.userid, dbid: taken.dbid, toplevel: taken.toplevel, queryid: taken.queryid },
        delta: owed ? owed.delta.map((d, i) => addExact(d, taken.metrics[i] ?? 0)) : taken.metrics,
      });
    }
    snapshot.overflowOwed();
    for (const sample of snapshot.queries) {
      const key = queryKey(sample);
      const remainder = this.remainders.get(key);
      // The entry's bytes did not change since its figures were written (the same decoded array).
      if (!remainder && this.queryDeltas.isBaseline(key, sample.metrics)) continue;
      let delta = this.queryDeltas.delta(key, sample.metrics);
      if (remainder) delta = delta.map((d, i) => addExact(d, remainder.delta[i] ?? 0));
      if (delta.every(isZero)) continue;
      // Left out by the budget, a key is still changed (never evicted as quiet): a later flush writes it.
      changed.add(key);
      queryCandidates.push({ key, identity: sample, delta, metrics: sample.metrics });
    }
    // What evicted keys still owed, for keys not back in the map.
    for (const [key, remainder] of this.remainders) {
      // A key back in the map had its remainder added to its delta above.
      if (changed.has(key)) continue;
      queryCandidates.push({ key, identity: remainder.identity, delta: remainder.delta, metrics: null });
    }
    const chosenQueries = this.queryBacklog.choose(queryCandidates, (c) => c.key, budget);
    const queriesDeferred = queryCandidates.length - chosenQueries.length;
    for (const c of chosenQueries) {
      const { identity } = c;
      queries.push({
        userid: identity.userid,
        dbid: identity.dbid,
        toplevel: identity.toplevel,
        queryid: BigInt.asIntN(64, identity.queryid).toString(),
        values: toColumnValues(c.delta),
      });
    }
    queryCommits.push(() => {
      for (const c of chosenQueries) {
        if (c.metrics) this.queryDeltas.commit(c.key, c.metrics);
        this.remainders.delete(c.key);
      }
      this.queryBacklog.written(chosenQueries.map((c) => c.key));
    });
    const fill = snapshot.fill.find((f) => f.map === 'queries');
    // A key refused with room left (map_no_memory) is pressure too: the maps are charged to the
    // collector's memory cgroup, and a deleted key gives its memory back there (bpf/maps.bpf.h).
    // So is a role refused its share (only ever near full) and a key held in an overflow slot.
    const refusals =
      (snapshot.counters.queries_full ?? 0n) +
      (snapshot.counters.map_no_memory ?? 0n) +
      (snapshot.counters.role_quota ?? 0n) +
      BigInt(fill?.held ?? 0);
    const pressure = (fill !== undefined && fill.entries >= PRESSURE_FILL * fill.maxEntries) || refusals > this.lastRefusals;
    queryCommits.push(() => {
      this.lastRefusals = refusals;
      this.held.written(snapshot.queries, changed, snapshot.queriesComplete, queryKey);
      // The reader may stop reading these keys again; a key left for later needs a whole read.
      snapshot.queriesWritten(queriesDeferred === 0);
      this.evictQuiet(snapshot.backends, pressure, fill?.maxEntries ?? 0);
    });
    return { queries, queryCommits, queriesDeferred };
  }

  /**
   * The backend rows of a snapshot, at most `budget`, exited processes first, never the
   * collector's own backends; and what to commit once written.
   */
  private prepareBackendRows(
    snapshot: MapSnapshot,
    budget: number,
    toColumnValues: (delta: readonly ExactInt[]) => MetricValue[],
    readByMs: number,
  ) {
    const backendCommits: Array<() => void> = [];
    const backends: BackendRow[] = [];
    // Summed exactly without a bigint per addition; one at the end.
    let busy: ExactInt = 0;
    let identities = 0;
    let backendsUrgent = false;
    const exited: BackendRecordRef[] = [];
    const backendCandidates: BackendCandidate[] = [];
    // Whatever the order of the read, this prepare and the exclusion, the collector's own backends are never written.
    const retracted = [...this.retracting];
    const own = (sample: BackendSample) => retracted.some((r) => matches(r, sample.pid, sample.taskStartNs));
    const ownRecords = snapshot.backends.filter(own);
    const samples = ownRecords.length ? snapshot.backends.filter((sample) => !own(sample)) : snapshot.backends;
    for (const sample of samples) this.backendTypes.learn(sample.pid, sample.backendType);
    const nowNs = process.hrtime.bigint();
    for (const sample of samples) {
      const key = backendKey(sample);
      const isExited = sample.exitedNs !== 0n;
      // Until it has its identity the row key (pid, backend_start) is not final: it waits.
      if (this.missingIdentity(sample, nowNs) === 'in grace') {
        identities++;
        continue;
      }
      // The very figures last written (the record's bytes did not change since): nothing to write.
      if (!isExited && this.backendDeltas.isBaseline(key, sample.metrics)) continue;
      const delta = this.backendDeltas.delta(key, sample.metrics);
      if (!isExited && delta.every(isZero) && this.backendDeltas.has(key)) continue;
      if (isExited || !this.backendDeltas.has(key)) backendsUrgent = true;
      for (const i of BUSY_INDEXES) busy = addExact(busy, delta[i] ?? 0);
      const row: BackendRow = {
        pid: sample.pid,
        backendStartUs: this.rowStartUs(sample),
        backendType: this.backendTypes.name(sample),
        datid: sample.identityKnown && sample.dbid ? sample.dbid : null,
        usesysid: sample.identityKnown && sample.userid ? sample.userid : null,
        queryid: sample.queryid ? BigInt.asIntN(64, sample.queryid).toString() : null,
        cgroup: this.cgroups.pathOf(sample.memoryCgroup, readByMs),
        values: toColumnValues(delta),
        exitedAtUs: isExited ? sample.exitedNs / 1000n + this.monotonicToUnixUs : null,
      };
      backendCandidates.push({
        key,
        row,
        sample,
        record: isExited ? { key: sample.key, taskStartNs: sample.taskStartNs, retired: sample.retired } : null,
      });
    }
    // Exited processes first: writing them frees their map entries.
    const chosenBackends = this.backendBacklog.choose(
      backendCandidates,
      (c) => c.key,
      budget,
      (c) => (c.record ? 0 : 1),
    );
    const backendsDeferred = backendCandidates.length - chosenBackends.length;
    for (const c of chosenBackends) {
      backends.push(c.row);
      if (c.record) exited.push(c.record);
    }
    backendCommits.push(() => {
      for (const { key, sample, record } of chosenBackends) {
        if (record) {
          this.backendDeltas.forget(key);
          this.backendTypes.forget(sample.pid);
        } else if (!this.retracting.some((r) => matches(r, sample.pid, sample.taskStartNs))) {
          // (Excluded since this was prepared: its baseline went with it.)
          this.backendDeltas.commit(key, sample.metrics);
        }
      }
      this.backendBacklog.written(chosenBackends.map((c) => c.key));
    });

    // Records of the collector's own backends made before (or racing with) their exclusion: the
    // map forgets them; a live one's next switch makes its record again, excluded.
    exited.push(...ownRecords.map((sample) => ({ key: sample.key, taskStartNs: sample.taskStartNs, retired: sample.retired })));
    backendCommits.push(() => {
      // Done once written from a snapshot read after the exclusion that held nothing of it.
      const done = new Set(retracted.filter((r) => r.toNs < snapshot.takenNs && !ownRecords.some((s) => matches(r, s.pid, s.taskStartNs))));
      this.retracting = this.retracting.filter((r) => !done.has(r));
    });
    return { backends, backendCommits, backendsDeferred, exited, busy, identities, backendsUrgent, retracted, ownRecords };
  }

  /**
   * A backend row's backend_start (µs since the Unix epoch): its PgBackendStatus' as BPF read it.
   * Until BPF has (a process asleep since before the collector attached), pg_stat_activity's for
   * the same process (one that started when the task did), so that the row is the same once BPF
   * reads it; failing both, the task's start.
   */
  private rowStartUs(sample: BackendSample): bigint {
    if (sample.backendStartUs !== 0n) return sample.backendStartUs + PG_EPOCH_UNIX_US;
    const shown = this.backendTypes.startUs(sample.pid);
    const taskStartUs = sample.taskStartNs / 1000n + this.monotonicToUnixUs;
    if (shown !== undefined && shown - taskStartUs < SAME_START_US && taskStartUs - shown < SAME_START_US) return shown;
    return sample.taskStartNs / 1000n + BOOT_TIME_UNIX_US;
  }

  /**
   * After a flush was written: counts how long each key has been quiet and evicts the quiet
   * ones. A key is deleted with what it held at that moment; anything beyond the written
   * baseline (an increment since the snapshot) is kept as a remainder for the next flush.
   * A statement a live backend of `backends` is still on stays: its end (the call) may come
   * after the delete, when its role's quota could refuse the key again.
   */
  private evictQuiet(backends: readonly BackendSample[], pressure: boolean, maxEntries: number): void {
    if (!this.queryEviction.enabled) return;
    let running: Set<string> | null = null;
    // A map sized from a large pg_stat_statements.max heals in two flushes too.
    const max = Math.max(MAX_EVICTIONS_PER_FLUSH, Math.ceil(maxEntries / 2));
    const candidates = this.held.quietest(pressure ? 1 : QUIET_FLUSHES, max, (key) => !(running ??= runningStatements(backends)).has(key));
    const values = this.queryEviction.delete(candidates.map((s) => s.rawKey));
    if (!values) return;
    candidates.forEach((sample, i) => {
      const key = queryKey(sample);
      const value = values[i];
      this.held.forget(key);
      if (!value) return;
      this.evictedQueries++;
      const delta = this.queryDeltas.delta(key, value);
      this.queryDeltas.forget(key);
      if (!delta.every(isZero))
        this.remainders.set(key, {
          identity: { userid: sample.userid, dbid: sample.dbid, toplevel: sample.toplevel, queryid: sample.queryid },
          delta,
        });
    });
  }
}

function queryKey(s: QueryIdentity & { id?: string }): string {
  return s.id ?? queryIdentityKey(s);
}

/** The top-level statements live backends were on when `backends` was read, as query keys. */
function runningStatements(backends: readonly BackendSample[]): Set<string> {
  const running = new Set<string>();
  for (const b of backends) {
    if (b.exitedNs === 0n && b.queryid !== 0n)
      running.add(queryIdentityKey({ userid: b.userid, dbid: b.dbid, toplevel: true, queryid: b.queryid }));
  }
  return running;
}

/**
 * Whether a backend row (its pid, backend_start in microseconds) is one of `retracted`'s; null
 * when nothing is retracted. Indexed by pid: under connection churn retractions run to thousands.
 */
export function retractedRowTest(retracted: readonly Retraction[]): ((row: { pid: number; backendStartUs: bigint }) => boolean) | null {
  if (!retracted.length) return null;
  const byPid = new Map<number, Retraction[]>();
  for (const r of retracted) {
    const same = byPid.get(r.pid);
    if (same) same.push(r);
    else byPid.set(r.pid, [r]);
  }
  return (row) => byPid.get(row.pid)?.some((r) => row.backendStartUs >= r.fromUs && row.backendStartUs <= r.toUs) ?? false;
}

/** Whether the process that had `pid` and started at `taskStartNs` (CLOCK_MONOTONIC) is the retracted one. */
function matches(r: Retraction, pid: number, taskStartNs: bigint): boolean {
  return r.pid === pid && taskStartNs >= r.fromNs && taskStartNs <= r.toNs;
}

function backendKey(s: BackendSample): string {
  return `${s.pid}/${s.taskStartNs}`;
}
