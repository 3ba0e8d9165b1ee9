import type { ProgramName } from '../bpf/contract.js';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { DroppedCounterName } from '../bpf/counters.js';
import { probeCapabilities } from '../capabilities/probe-capabilities.js';
import { writeCapabilities } from '../capabilities/write-capabilities.js';
import { assertHostReady } from '../capabilities/host-checks.js';
import { CollectorObject, type BpfPostmaster } from '../collector/collector-object.js';
import { pgStatStatementsMax } from '../collector/query-capacity.js';
import type { PerfEventSpec } from '../collector/perf-events.js';
import type { SwitchProgram } from '../collector/switch-program.js';
import type { Activity, MapFill } from '../collector/map-samples.js';
import type { MapSnapshot } from '../collector/map-snapshot.js';
import { ControlPlane } from '../control/control-plane.js';
import { oneLine, UserError } from '../errors.js';
import { loadNative } from '../native/bpf-native.js';
import { LOG_PERIOD_MS, rateLimited } from '../rate-limited-log.js';
import type { SupportContext } from '../families/family.js';
import { familyRodata, PROBE_SETS, type ProbeSetName } from '../families/index.js';
import { probeSetUnsupportedReason } from '../capabilities/probe-set-support.js';
import { type FlushWiring, METRIC_FIELDS, wireFlush } from '../flush/flush-wiring.js';
import type { HistogramRow } from '../flush/histogram-deltas.js';
import type { QueryWaitEventRow } from '../families/waits/wait-events-part.js';
import { IdleGate } from '../flush/idle-gate.js';
import { DEFAULT_HISTORY_INTERVAL_MS } from '../flush/history-part.js';
import { pinnedConfig, pinnedOnConnect } from '../storage/pinned-session.js';
import { backendPid } from '../storage/backend-pid.js';
import { clientDatabase } from '../storage/client-database.js';
import { preparingPool } from '../storage/preparing-pool.js';
import { connect, exemptFromIdleTimeout } from '../storage/connect.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { BackendRow, QueryRow } from '../storage/metric-row.js';
import { migrateSchema } from '../storage/migrate-schema.js';
import { QueryIncrements } from '../storage/query-increments.js';
import { calibrateStatusLayout } from '../postmaster/calibrate-status-layout.js';
import { PostmasterFollower } from './postmaster-follower.js';
import { collectorApplicationName, lockServer } from '../postmaster/server-lock.js';
import { discoverPostmaster } from '../postmaster/discover-postmaster.js';
import { defaultNodeName, nodeConnectionOptions } from '../storage/node-name.js';
import { isStandby, openSink, sinkOnNode, sinkWriter, STANDBY_WITHOUT_SINK } from '../sink/sink.js';
import { markVanishedBackends } from '../sink/vanished-backends.js';
import type { PostmasterTarget, StatusLayout } from '../postmaster/postmaster-target.js';
import { clientConfig } from '../storage/connection-string.js';

/** The writer session's lock_timeout (see the writer pool). */
const WRITER_LOCK_TIMEOUT = '-c lock_timeout=5s';

export interface SidecarOptions {
  /** libpq DSN of the node (the server measured); undefined means the PG* environment variables. */
  connectionString?: string;
  /** Where bpf_stats is written (`run --sink`): another database, e.g. a standby's primary; undefined: the node's own. */
  sink?: string;
  /** The node's name in bpf_stats (`run --node`); default: host name and port (src/storage/node-name.ts). */
  node?: string;
  /** Flush period. */
  intervalMs: number;
  /** Opt-in probe sets to attach besides the default ones. */
  probeSets?: ProbeSetName[];
  /** Replaces the perf events of perf-event programs (see CollectorObjectOptions.perfEvents). */
  perfEvents?: Partial<Record<ProgramName, PerfEventSpec>>;
  /** The switch-out program (default: the one this kernel's sched_switch takes; see CollectorObjectOptions.switchProgram). Tests only. */
  switchProgram?: SwitchProgram;
  log?: (line: string) => void;
  /** History retention (default 7 days); null: no history is written. */
  historyRetentionMs?: number | null;
  /** How long rows of exited backends, finished requests and stopped collectors stay (default: the history retention, 7 days when off). */
  rowRetentionMs?: number;
  /** History partition width (default: a seventh of the retention, 1 s to 1 day). */
  historyPartitionMs?: number;
  /** How often periodic flushes write history rows (default 5 min; 0 or the flush interval: every flush). */
  historyIntervalMs?: number;
  /** BPF map capacities (default 8192 backends; query keys from pg_stat_statements.max, src/collector/query-capacity.ts); small ones let tests force overflow. */
  maxBackends?: number;
  maxQueries?: number;
  /** Query keys one role may hold in the map once it is 7/8 full (default half of maxQueries; 0: no limit). */
  maxQueryKeysPerRole?: number;
  /** Capacity of the set of the collector's own live connections (default 256); small ones let tests prove it never fills. */
  maxExcludedPids?: number;
  /** Capacity of the set of query keys changed since the last read (default maxQueries); small ones let tests make it overflow. */
  maxQueryChanges?: number;
  /** Capacity of hist_changes, the histograms changed since the last read (default: the histograms map's; tests shrink it). */
  maxHistogramChanges?: number;
  /** Capacity of the histograms map (default: by the host's CPUs, CollectorObject); tests shrink it. */
  maxHistograms?: number;
  /** Capacity of each lock-wait map (default 4096); tests shrink it. */
  maxLockWaits?: number;
  /** Capacity of each wait-event map (default 8192); tests shrink it. */
  maxWaitEvents?: number;
  /** Wait events a process's record and a query's entry count themselves, before the wait-event maps (default: all their slots); tests set 0 to fill those maps. */
  waitSlots?: number;
  /** Listen for bpf_stats.collect()/stop() requests (default true). */
  control?: boolean;
  /** How often the control plane looks for requests whose doorbell it missed (default 15 s). */
  controlPollMs?: number;
  /** How long to wait for a new postmaster after the one attached to is gone (default 60 s). */
  postmasterWaitMs?: number;
  /** How often the health row is written when flushes have nothing else to write (default 30 s). */
  healthHeartbeatMs?: number;
}

/** What the last flush did (for logs, tests, and later bpf_stats.health). */
export interface FlushStatus {
  at: Date;
  ms: number;
  queries: number;
  backends: number;
  error: string | null;
  /**
   * Where a flush that read the maps spent its time: reading and decoding them (`readMs`), and
   * its one statement from sending to the server's answer (`statementMs`, 0 when nothing was
   * sent). The rest of `ms` built the rows and the statement (and looked up texts and names).
   */
  phases?: { readMs: number; statementMs: number };
}

/**
 * What a flush wrote, for listeners (the Prometheus exporter): the increments of exactly the
 * rows committed (none when it failed), and what the BPF side looked like then.
 */
export interface FlushReport extends FlushStatus {
  queryRows: readonly QueryRow[];
  backendRows: readonly BackendRow[];
  histogramRows: readonly HistogramRow[];
  /** The query_wait_event_stats increments the flush wrote (src/families/waits/). */
  waitEventRows: readonly QueryWaitEventRow[];
  /** The BPF `counters` (dropped events by kind), cumulative since load; empty when the maps were not read. */
  counters: Readonly<Record<string, bigint>>;
  fill: readonly MapFill[];
  attached: readonly ProbeSetName[];
}

/**
 * The collector: finds the postmaster behind the connection, migrates bpf_stats, loads and
 * attaches the probe sets, and writes what BPF aggregated every interval.
 *
 * @example
 * const sidecar = await Sidecar.start({ connectionString: dsn, intervalMs: 1000 });
 * // ... later
 * await sidecar.stop();
 */
export class Sidecar {
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<FlushStatus> | null = null;
  /** The explicit flush that starts once the one in progress is done, shared by everyone who asked meanwhile. */
  private flushingNext: Promise<FlushStatus> | null = null;
  private stopped = false;
  /** While paused: the sets resume() attaches again. */
  private pausedSets: ProbeSetName[] | null = null;
  private control: pg.Client | null = null;
  /** The LISTEN/NOTIFY control plane (src/control/), when enabled. */
  controlPlane: ControlPlane | null = null;
  /** Sets attached at any time since the last flush: their columns are measured, not NULL. */
  private measuring = new Set<ProbeSetName>();
  /** Per counter: its value and time at the last line logged about it. */
  private readonly overflow = new Map<string, { value: bigint; at: number }>();
  lastFlush: FlushStatus | null = null;
  /** Lines about conditions that can repeat (failures, lost connections): one per topic per LOG_PERIOD_MS. */
  private readonly logLimited: (line: string, topic?: string) => void;
  private readonly flushListeners: Array<(report: FlushReport) => void> = [];
  /** Watches the postmaster and follows it across restarts. */
  follower: PostmasterFollower | null = null;
  /** Each restart followed: when (performance.now()), the new postmaster, the gap in ms. */
  readonly followed: Array<{ at: number; pgPid: number; gapMs: number; adoptedByBpf: boolean }> = [];
  private sweepUntil = 0;
  private closeVanishedDue = false;
  /** Ends a periodic flush with nothing to write before it reads the maps. */
  private readonly idle: IdleGate;
  // Declared before `failed`, whose initializer assigns it.
  private fail: (error: UserError) => void = () => undefined;
  /** The node's name in every row written (src/sink/). */
  node = '';
  /** Whether the writer and control connections are backends of the node itself (no sink, or a sink on the node's server). */
  private sinkOnNode = true;
  /** Settles when the sidecar cannot go on (the postmaster it attached to is gone). */
  readonly failed: Promise<UserError> = new Promise((resolve) => (this.fail = resolve));

  private constructor(
    private readonly options: SidecarOptions,
    readonly target: PostmasterTarget,
    readonly layout: StatusLayout,
    private readonly object: CollectorObject<ProbeSetName>,
    /** What decides whether a probe set can run here (probeSetUnsupportedReason). */
    private readonly support: SupportContext,
    private readonly db: Kysely<BpfStatsDatabase>,
    control: pg.Client,
    private readonly writing: FlushWiring,
  ) {
    this.logLimited = rateLimited(options.log ?? (() => undefined));
    this.adoptControl(control);
    for (const set of object.probes.attached()) this.measuring.add(set);
    this.idle = new IdleGate(
      () => object.maps.readActivity(),
      (busyNs) => this.wouldWriteNothing(busyNs),
    );
  }

  static async start(options: SidecarOptions): Promise<Sidecar> {
    const log = options.log ?? (() => undefined);
    assertHostReady(options.probeSets);
    const control = await connect(options.connectionString, collectorApplicationName());
    let object: CollectorObject<ProbeSetName> | null = null;
    let db: Kysely<BpfStatsDatabase> | null = null;
    let sink: pg.Client | null = null;
    try {
      await exemptFromIdleTimeout(control);
      const destination = await claimServer(control, options, log);
      sink = destination.sink;
      const { node, asNode, local } = destination;
      const store = sink ?? control;
      const { target, layout } = await findServer(control, options, log);
      const support: SupportContext = { target, layout, perfEvents: options.perfEvents ?? {} };
      const sets = setsToAttach(options, support, log);
      const loaded = await loadAndAttach(control, sink && local ? sink : null, target, layout, sets, options, log);
      object = loaded.object;
      // The verifier's answers are this host's too: `unsupportedReason`, collect() and capabilities say them.
      support.refused = object.refused;
      const { current, pgssMax } = loaded;
      await migrateSchema(store, undefined, node, { asNode });
      log(`node ${node}${sink ? `: bpf_stats is written into the sink${local ? ' (a database of this same server)' : ''}` : ''}`);
      const ownBackends: WriterBackends = { checkPostmaster: () => undefined, forgetExcluded: () => undefined };
      db = openWriter(options, node, local, object, ownBackends, log);

      let nodeClient = async (): Promise<pg.Client> => control;
      const writing = await startWriting(db, object, target, layout, options, asNode, () => nodeClient(), ownBackends);
      const sidecar = new Sidecar(options, target, layout, object, support, db, control, writing);
      nodeClient = () => sidecar.controlClient();
      sidecar.node = node;
      sidecar.sinkOnNode = local;
      sidecar.follow(current);
      ownBackends.checkPostmaster = () => sidecar.follower?.check();
      await sidecar.markVanishedBackends();
      // The first figures now (what ran while the schema was checked), not an interval later;
      // what is not figures comes after them.
      await sidecar.flush({ lazy: true });
      sidecar.timer = setInterval(() => void sidecar.flush({ lazy: true }), options.intervalMs);
      try {
        await recordCapabilities(support, pgssMax, store, log);
        await sink?.end();
        sink = null;
        // Never a reason not to start: a failure is one line, retried at the next period.
        await writing.rowRetention.maintainWhenDue(db, log);
        if (options.control ?? true) {
          // With a sink, requests are made and answered there: a standby can neither write nor NOTIFY.
          sidecar.controlPlane = await ControlPlane.start({
            connectionString: options.sink ?? options.connectionString,
            node,
            asNode,
            host: sidecar,
            log,
            pollMs: options.controlPollMs,
          });
        }
      } catch (error) {
        await sidecar.stop();
        throw error;
      }
      // Loading parsed the kernel's BTF into memory freed since: give it back (RSS;
      // bench/journal/memory.md#memory-after-start).
      loadNative().releaseFreeMemory();
      return sidecar;
    } catch (error) {
      object?.close();
      await db?.destroy().catch(() => undefined);
      await sink?.end().catch(() => undefined);
      await control.end().catch(() => undefined);
      throw error;
    }
  }

  /**
   * Pauses collection: every probe is detached, the figures collected so far are written, and
   * nothing is counted or written until resume(). For an operator who wants to see the
   * database without the collector (SIGUSR1 to `pg-bpf-stats run`), and for bench/overhead.
   */
  async pause(): Promise<void> {
    if (this.stopped) return;
    if (this.pausedSets) {
      this.options.log?.('already paused (SIGUSR2 resumes)');
      return;
    }
    this.pausedSets = this.object.probes.pause();
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
    this.options.log?.(`paused: probe sets ${this.pausedSets.join(', ')} detached until resumed`);
  }

  /** Collects again after pause(), with the same probe sets (and any collect() asked for meanwhile). */
  resume(): void {
    if (this.stopped) return;
    if (!this.pausedSets) {
      this.options.log?.('not paused: nothing to resume');
      return;
    }
    const sets = this.pausedSets;
    this.pausedSets = null;
    // Flushing goes on whatever happens: a set that fails to attach is an error for the caller.
    this.timer = setInterval(() => void this.flush({ lazy: true }), this.options.intervalMs);
    try {
      this.object.probes.resume(sets);
    } finally {
      for (const set of this.object.probes.attached()) this.measuring.add(set);
    }
    this.options.log?.(`resumed: probe sets ${sets.join(', ')}`);
  }

  /** Attaches a probe set now, or at resume() when paused (UserError when this Postgres or host cannot support it). */
  attach(name: ProbeSetName): void {
    const reason = this.unsupportedReason(name);
    if (reason) throw new UserError(`probe set ${name} is not supported here: ${reason}`);
    if (this.pausedSets) {
      if (!this.pausedSets.includes(name)) this.pausedSets.push(name);
      this.options.log?.(`probe set ${name} will be attached when collection resumes`);
      return;
    }
    this.object.probes.attach(name);
    this.measuring.add(name);
    this.options.log?.(`attached probe set ${name}`);
  }

  /** Why a probe set cannot be attached here (this Postgres, this host, this object), or null. */
  unsupportedReason(name: ProbeSetName): string | null {
    return probeSetUnsupportedReason(name, this.support);
  }

  /**
   * Detaches an opt-in probe set. The default sets and the sets given at start stay attached:
   * this does nothing for them. The set's columns still count as measured until the next flush.
   */
  detach(name: ProbeSetName): void {
    if (PROBE_SETS[name].default || this.options.probeSets?.includes(name)) return;
    if (this.pausedSets) {
      this.pausedSets = this.pausedSets.filter((set) => set !== name);
      return;
    }
    if (!this.object.probes.attached().includes(name)) return;
    this.object.probes.detach(name);
    this.options.log?.(`detached probe set ${name}`);
  }

  /**
   * Leaves another of the sidecar's own backends out of the figures (the control plane's
   * connections). A live backend of another postmaster means a restart, as for the writer; a
   * backend already gone (terminated right after connecting) says nothing about that.
   */
  excludeBackend(pid: number): void {
    // A backend of a sink on another server is none of the node's.
    if (!this.sinkOnNode) return;
    this.follower?.check();
    this.writing.rows.excluded(pid, this.object.exclude(pid));
  }

  /** Periodic flushes that ended before reading the maps: nothing had happened that they would write. */
  get quietFlushes(): number {
    return this.idle.quietTicks;
  }

  /** Probe sets attached now, or to be attached again when paused. */
  attached(): ProbeSetName[] {
    return this.pausedSets ? [...this.pausedSets] : this.object.probes.attached();
  }

  /**
   * Calls `listener` after every flush with what it committed (synchronously, on the flush path:
   * a listener must do no more than O(rows) work and must not block).
   */
  onFlush(listener: (report: FlushReport) => void): void {
    this.flushListeners.push(listener);
  }

  private report(report: FlushReport): void {
    for (const listener of this.flushListeners) {
      try {
        listener(report);
      } catch (error) {
        this.options.log?.(`flush listener failed: ${oneLine(error)}`);
      }
    }
  }

  /**
   * Writes what was collected since the last flush. `lazy` (the periodic flush): what can wait
   * without loss waits (FlushInput.lazy), and a flush with nothing else to write sends nothing;
   * a lazy call while a flush is in progress shares it. An explicit call writes everything
   * collected before it: the flush in progress may have read the maps earlier (a final flush at
   * stop, a test's, collect()'s would have missed what came since), so it gets the next one,
   * shared by every explicit call made meanwhile.
   */
  flush(options: { lazy?: boolean } = {}): Promise<FlushStatus> {
    const lazy = options.lazy ?? false;
    if (!this.flushing) {
      this.flushing = this.flushOnce(lazy).finally(() => (this.flushing = null));
      return this.flushing;
    }
    if (lazy) return this.flushing;
    this.flushingNext ??= this.flushing
      .catch(() => undefined)
      .then(() => {
        this.flushingNext = null;
        // Now, or after one more if a (perhaps lazy) flush began in between.
        return this.flush();
      });
    return this.flushingNext;
  }

  /** One flush: the maps are read once, every part prepares from that, one statement writes it all. */
  private async flushOnce(lazy: boolean): Promise<FlushStatus> {
    const started = performance.now();
    const at = new Date();
    const { rows, writer, health, retention, rowRetention, histograms, waitEvents } = this.writing;
    let maps: MapSnapshot | null = null;
    if (lazy && this.idle.quiet()) {
      // Nothing happened that a flush would write: a successful flush of no rows, without reading the maps.
      health.quietTick(started);
      this.lastFlush = { at, ms: performance.now() - started, queries: 0, backends: 0, error: null };
      if (this.flushListeners.length)
        this.report({
          ...this.lastFlush,
          queryRows: [],
          backendRows: [],
          histogramRows: [],
          waitEventRows: [],
          counters: {},
          fill: [],
          attached: this.object.probes.attached(),
        });
      return this.lastFlush;
    }
    let mark: Activity | null = null;
    try {
      // After a restart the control session (and the server lock it held) is gone: take both again.
      if (!this.control && !this.stopped) await this.controlClient();
      // After a crash, backends of the old postmaster exit as orphans, out of BPF's sight.
      if (performance.now() < this.sweepUntil) this.object.markExitedGone();
      const attachedAtStart = this.object.probes.attached();
      const measured = new Set([...this.measuring, ...attachedAtStart]);
      // Exclusions of connections that died unseen (before being excluded, or while paused).
      this.object.forgetGoneExclusions();
      mark = this.idle.read(); // before the snapshot: a change racing it is seen again, never missed
      const readFrom = performance.now();
      maps = this.object.maps.snapshot(METRIC_FIELDS);
      const readMs = performance.now() - readFrom;
      this.reportOverflow(maps.counters);
      // pg_stat_activity is asked only when a backend we cannot name yet, or a process whose
      // backend_start BPF has not read, appeared.
      if (rows.needsNames(maps)) rows.observeStatActivity(maps, await this.readStatActivity());
      await retention?.maintainWhenDue(this.db, this.options.log ?? (() => undefined));
      await rowRetention.maintainWhenDue(this.db, this.options.log ?? (() => undefined));
      // Texts of queries new to this run, from the node's pg_stat_statements, go with their figures.
      await this.writing.texts.load(
        rows.prepare(maps, measured).queries,
        await this.controlClient(),
        this.options.log ?? (() => undefined),
      );
      rowRetention.noteNewKeys(this.writing.texts.takeNewKeys());
      const sent = await writer.write({ maps, measured, startedMs: started, lazy });
      // After a restart: rows of the old postmaster's processes this run never tracked (asleep
      // since before it attached) are closed as at start-up.
      if (this.closeVanishedDue) {
        await this.markVanishedBackends();
        this.closeVanishedDue = false;
      }
      // A lazy flush with nothing urgent sent nothing: what it prepared waits for the next one.
      const written = sent ? rows.prepare(maps, measured) : { queries: [], backends: [] };
      // What the next flush measures: the sets attached now, those detached while this one ran
      // (a stop or a pause during it: their last figures are still in the maps), and paused
      // ones (a row written while paused, an exit, carries zero increments, not NULL ones, into
      // the NOT NULL totals).
      const attachedNow = this.object.probes.attached();
      this.measuring = new Set([
        ...attachedNow,
        ...attachedAtStart.filter((set) => !attachedNow.includes(set)),
        ...(this.pausedSets ?? []),
      ]);
      this.idle.flushed(mark);
      this.lastFlush = {
        at,
        ms: performance.now() - started,
        queries: written.queries.length,
        backends: written.backends.length,
        error: null,
        phases: { readMs, statementMs: writer.lastStatementMs },
      };
      // Its map reads, rows and statement were freed to glibc's heap, which keeps small blocks.
      if (written.queries.length + written.backends.length >= TRIM_AFTER_ROWS) loadNative().releaseFreeMemory();
      if (this.flushListeners.length) {
        this.report({
          ...this.lastFlush,
          queryRows: written.queries,
          backendRows: written.backends,
          histogramRows: sent ? histograms.lastCommitted : [],
          waitEventRows: sent ? (waitEvents?.lastCommitted ?? []) : [],
          counters: maps.counters,
          fill: maps.fill,
          attached: this.object.probes.attached(),
        });
      }
    } catch (error) {
      this.idle.flushed(null);
      this.follower?.hurry();
      // Nothing was committed: the same increments go out with the next flush.
      const repeated = this.lastFlush?.error === oneLine(error);
      this.lastFlush = { at, ms: performance.now() - started, queries: 0, backends: 0, error: oneLine(error) };
      // One line per distinct failure, not one per interval while the database is away.
      if (!repeated) this.logLimited(`flush failed, will retry every interval: ${this.lastFlush.error}`, 'flush failed');
      // A missing partition (a clock jump, a long pause) must not wait for the next period.
      retention?.soon();
      await health.failed(oneLine(error));
      if (this.flushListeners.length) {
        this.report({
          ...this.lastFlush,
          queryRows: [],
          backendRows: [],
          histogramRows: [],
          waitEventRows: [],
          counters: maps?.counters ?? {},
          fill: maps?.fill ?? [],
          attached: this.object.probes.attached(),
        });
      }
    }
    return this.lastFlush;
  }

  /**
   * Whether a periodic flush now would write nothing, `busyNs` of busy time having been noted
   * since the last one read the maps (IdleGate): the rows wait for nothing and no part or
   * housekeeping of the sidecar is due.
   */
  private wouldWriteNothing(busyNs: bigint): boolean {
    const { rows, writer, health, texts, retention, rowRetention } = this.writing;
    const attached = this.object.probes.attached();
    return (
      this.control !== null &&
      performance.now() >= this.sweepUntil &&
      !this.closeVanishedDue &&
      attached.length === this.measuring.size &&
      attached.every((set) => this.measuring.has(set)) &&
      rows.wouldWriteNothing(busyNs) &&
      writer.partsSettled() &&
      !health.due() &&
      !texts.due() &&
      !retention?.due() &&
      !rowRetention.due()
    );
  }

  /** Detaches every probe, writes what is left, and closes connections; `reason` goes to the health row's stop_reason. */
  async stop(reason = 'stopped'): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.follower?.close();
    if (this.timer) clearInterval(this.timer);
    await this.controlPlane?.stop();
    for (const set of this.object.probes.attached()) this.object.probes.detach(set);
    // The last figures are only in the BPF maps: give a database that is away a few chances.
    for (let attempt = 1; attempt <= FINAL_FLUSH_ATTEMPTS; attempt++) {
      if (!(await this.flush()).error) break;
      if (attempt < FINAL_FLUSH_ATTEMPTS) await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    await this.writing.health.stopped(reason);
    this.object.close();
    await this.db.destroy().catch(() => undefined);
    await this.control?.end().catch(() => undefined);
  }

  /** The control connection, reopened (and excluded again) after the database went away. */
  private async controlClient(): Promise<pg.Client> {
    if (this.control) return this.control;
    const client = await connect(this.options.connectionString, collectorApplicationName());
    const pid = backendPid(client);
    this.follower?.check();
    this.writing.rows.excluded(pid, this.object.exclude(pid));
    try {
      await exemptFromIdleTimeout(client);
      // The server released the lock with the old session: take it again, or give way.
      const lockNote = await lockServer(client);
      if (lockNote) this.logLimited(lockNote, 'server lock');
    } catch (error) {
      await client.end().catch(() => undefined);
      if (error instanceof UserError) this.fail(error);
      throw error;
    }
    this.adoptControl(client);
    return client;
  }

  /**
   * Follows the postmaster across restarts (src/sidecar/postmaster-follower.ts): the BPF
   * filter moves to the new one; the maps and what they hold stay, so nothing is lost or
   * counted twice. A postmaster gone for good (or back as another binary) ends the run.
   */
  private follow(current: BpfPostmaster): void {
    const log = this.options.log ?? (() => undefined);
    this.follower = new PostmasterFollower({
      target: this.target,
      object: this.object,
      current,
      waitMs: this.options.postmasterWaitMs ?? DEFAULT_POSTMASTER_WAIT_MS,
      log,
      onFollowed: (target, gapMs, adoptedByBpf) => {
        this.writing.rows.setPostmaster(target.pgPid);
        this.sweepUntil = performance.now() + ORPHAN_SWEEP_MS;
        this.closeVanishedDue = true;
        log(
          `following postmaster ${target.pgPid} (pid ${current.tgid} for BPF${adoptedByBpf ? ', adopted by BPF at its first fork' : ''}), ${Math.round(gapMs)} ms after the old one was gone`,
        );
        this.followed.push({ at: performance.now(), pgPid: target.pgPid, gapMs, adoptedByBpf });
      },
      onLost: (error) => this.fail(error),
    });
    this.follower.start();
  }

  private adoptControl(client: pg.Client): void {
    const drop = () => {
      if (this.control === client) this.control = null;
      // The server may be restarting: follow the postmaster closely for a while.
      this.follower?.hurry();
    };
    client.on('error', (error) => {
      this.logLimited(`control connection lost: ${oneLine(error)}`, 'control connection lost');
      drop();
    });
    client.on('end', drop);
    this.control = client;
  }

  /** Every process pg_stat_activity shows: its type's name and its backend_start. */
  private async readStatActivity(): Promise<Array<{ pid: number; backendType: string; backendStartUs: bigint | null }>> {
    const client = await this.controlClient();
    try {
      const { rows } = await client.query<{ pid: number; backend_type: string; start_us: string | null }>(
        `SELECT pid, backend_type, (extract(epoch FROM backend_start) * 1000000)::int8::text AS start_us FROM pg_stat_activity`,
      );
      return rows.map((row) => ({
        pid: row.pid,
        backendType: row.backend_type,
        backendStartUs: row.start_us === null ? null : BigInt(row.start_us),
      }));
    } catch (error) {
      if (this.control === client) this.control = null;
      await client.end().catch(() => undefined);
      throw error;
    }
  }

  /**
   * Logs when a BPF map overflowed: at most one line per counter per LOG_PERIOD_MS, with the
   * count since the previous line (bpf_stats.health shows the cumulative figures every flush).
   */
  private reportOverflow(counters: Record<DroppedCounterName, bigint>): void {
    const now = Date.now();
    for (const [name, value] of Object.entries(counters)) {
      const logged = this.overflow.get(name) ?? { value: 0n, at: 0 };
      if (value <= logged.value || now - logged.at < LOG_PERIOD_MS) continue;
      const since = logged.at ? `in the last ${Math.round((now - logged.at) / 1000)} s` : 'since start';
      this.options.log?.(`${name}: ${value - logged.value} times ${since} (${COUNTER_MEANING[name as DroppedCounterName]})`);
      this.overflow.set(name, { value, at: now });
    }
  }

  /**
   * Backends a previous run left open that are gone now were not seen exiting: close them. Best
   * effort: a connection lost meanwhile (terminated, a restart) is one line, not a failed start;
   * the rows are then closed by a later start and deleted by the row retention in any case.
   */
  private async markVanishedBackends(): Promise<void> {
    try {
      await markVanishedBackends(this.db, await this.controlClient());
    } catch (error) {
      this.logLimited(`could not close the rows of backends that ended while no collector ran: ${oneLine(error)}`);
    }
  }
}

const FINAL_FLUSH_ATTEMPTS = 3;
/**
 * Rows written by one flush from which freed malloc memory is given back after it: at 1,000
 * busy connections it took ~2 MB off the collector's RSS, at no CPU the benches could see
 * (bench/journal/memory.md#freed-malloc-memory-given-back-after-a-large-flush).
 */
const TRIM_AFTER_ROWS = 512;
const DEFAULT_POSTMASTER_WAIT_MS = 60_000;
/** How long after a restart orphans of the old postmaster are looked for (they exit once they notice). */
const ORPHAN_SWEEP_MS = 30_000;

/**
 * The postmaster's tgid as BPF sees it (and its pid namespace's level): known from /proc on the
 * host, found through BPF from inside a container's pid namespace. A UserError when it cannot
 * be found: nothing is created then.
 */
async function postmasterForBpf(
  object: CollectorObject<ProbeSetName>,
  target: PostmasterTarget,
  connectionString: string | undefined,
): Promise<BpfPostmaster> {
  // A new connection makes the postmaster fork, and so leave its CPU, where BPF names it.
  const wake = async () => {
    const client = await connect(connectionString);
    await client.end();
  };
  const found = await object.findTgid({ ...target.pidns, tgid: target.pgPid }, wake);
  if (!found) {
    throw new UserError(
      `cannot translate postmaster ${target.pgPid} of pid namespace ${target.pidns.ino} to the pid the kernel knows it by (it did not run within 3 s, or BPF cannot name that namespace)`,
    );
  }
  return { ...found, ...target.addresses };
}

const COUNTER_MEANING: Record<DroppedCounterName, string> = {
  backends_full: 'a process could not be tracked: backends map full',
  queries_full:
    "a query key could not be added: queries map full, and its backend's overflow slot held another key; its time counts per backend only",
  status_unreadable: "a backend's PgBackendStatus could not be read; its time counts per backend only",
  histograms_full: 'a histogram could not be added: histograms map full; its observations are lost',
  lock_waits_full: 'a lock wait could not be added: lock_waits map full; its wait counts in lock_wait_ms only',
  lwlock_waits_full: 'an LWLock wait could not be added: lwlock_waits map full; its wait counts in lwlock_wait_ms only',
  wait_events_full:
    "a (query, wait event) key could not be added: query_wait_events map full; that sleep counts in its query's wait columns and in backend_wait_events only",
  backend_wait_events_full:
    "a (backend, wait event) key could not be added: backend_wait_events map full; that sleep counts in its backend's wait columns only",
  wait_blockers_full:
    'a (query, wait event, waker) key could not be added: query_wait_blockers map full (blockers set); that sleep counts in query_wait_events without its waker',
  role_quota:
    "a query key was not added: the queries map is 7/8 full and its role holds half of it (a flood of distinct statements), and its backend's overflow slot held another key; its time counts per backend only",
  role_quota_untracked: "a role's share of the queries map could not be counted (over 1024 roles): its keys were added without a limit",
  mem_stalls_full: 'a reclaim or compaction stall could not be timed: mem_stalls map full',
  io_inflight_full: "a block request's owner could not be kept: io_inflight map full; its IO is not attributed",
  exited_full:
    "an exited process's record could not be moved aside: exited_backends full; a new process given the pid is tracked from the next flush on",
  aio_handles_full: "an IO handle's owner could not be kept: aio_handles map full; an io worker's IO for it counts for the worker only",
  calls_unattributed:
    'a statement ended (query set) with no query key to count it under: its process had no record yet, or no query id or identity in PgBackendStatus; query_stats misses that call, pg_stat_statements has it',
  io_completions_missed:
    'a block request completed while BPF was disabled on that CPU (a bpf() call or kprobe ran there): charged when its request was reused, without latency',
  memio_untracked:
    'a stall or block request of a process not tracked yet (no context switch since attach): its query got it, its backend row may not',
  switch_scratch_busy:
    "a statement's or executor's end (query, nested sets) came while another task's, preempted on that CPU, held its scratch slot: the slice up to it went with the process's next switch-out, perhaps to the next statement",
  map_no_memory:
    "a map insert was refused with room left (the kernel's BPF allocator had nothing at hand, or the memory cgroup is at its limit): that event's figure is lost as for a full map",
};

/**
 * Start-up step 1: this server is ours to collect (the server lock) and where its figures go:
 * the node's own database, or a sink checked writable (a standby has no other choice). Before
 * anything is created; a sink opened here is closed again when a check refuses.
 */
async function claimServer(
  control: pg.Client,
  options: SidecarOptions,
  log: (line: string) => void,
): Promise<{ node: string; sink: pg.Client | null; asNode: boolean; local: boolean }> {
  let sink: pg.Client | null = null;
  try {
    // Before anything is created: a second collector on this server refuses here.
    const lockNote = await lockServer(control);
    if (lockNote) log(lockNote);
    // A standby cannot hold bpf_stats: its figures go to a sink, checked writable before anything is created.
    const node = options.node ?? (await defaultNodeName(control));
    if (!options.sink && (await isStandby(control))) throw new UserError(STANDBY_WITHOUT_SINK);
    sink = options.sink ? await openSink(options.sink, node, 'pg-bpf-stats sink') : null;
    // A role that is neither the sink's owner nor registered for this node is refused here, before anything is created.
    const asNode = sink ? (await sinkWriter(sink, node, log)) === 'node' : false;
    const local = sink ? await sinkOnNode(control, sink) : true;
    return { node, sink, asNode, local };
  } catch (error) {
    await sink?.end().catch(() => undefined);
    throw error;
  }
}

/** Start-up step 2: the postmaster behind the connection, and where its PgBackendStatus keeps what BPF reads. */
async function findServer(
  control: pg.Client,
  options: SidecarOptions,
  log: (line: string) => void,
): Promise<{ target: PostmasterTarget; layout: StatusLayout }> {
  const target = await discoverPostmaster(control);
  const observer = await connect(options.connectionString);
  let layout: StatusLayout;
  try {
    layout = await calibrateStatusLayout(target, control, observer);
  } finally {
    await observer.end();
  }
  if (layout.queryIdOffset === null) log('query ids are not computed (compute_query_id = off): figures are per backend only');
  if (!target.addresses.outerUserId)
    log(
      'this build does not show which user a statement runs as (GetOuterUserId not found): statements are keyed by the session user, not the role after SET ROLE',
    );
  return { target, layout };
}

/** Start-up step 3: the default sets and those asked for, less the optional ones this host cannot run. */
function setsToAttach(options: SidecarOptions, support: SupportContext, log: (line: string) => void): Set<ProbeSetName> {
  const sets = new Set<ProbeSetName>([
    ...Object.values(PROBE_SETS)
      .filter((s) => s.default)
      .map((s) => s.name),
    ...(options.probeSets ?? []),
  ]);
  // Every refusal comes before the schema is touched: nothing is created for a run that cannot start.
  for (const set of sets) {
    // A default set marked whereSupported is left out where this host cannot run it (and said
    // so); any other set that cannot run here is an error from attach().
    const optional = PROBE_SETS[set].whereSupported && !options.probeSets?.includes(set);
    const reason = probeSetUnsupportedReason(set, support);
    if (reason && optional) {
      log(`probe set ${set} is not supported here, collecting without it: ${reason}`);
      sets.delete(set);
    } else if (reason) throw new UserError(`probe set ${set} is not supported here: ${reason}`);
  }
  return sets;
}

/**
 * Start-up step 4: the BPF object loaded (and so verified) before the schema is touched, its
 * sets attached, and pointed at the postmaster as the kernel numbers it. The object is closed
 * again when a later part of this step fails.
 */
async function loadAndAttach(
  control: pg.Client,
  /** The sink's connection when it is a backend of this server (left out of the figures too). */
  localSink: pg.Client | null,
  target: PostmasterTarget,
  layout: StatusLayout,
  sets: ReadonlySet<ProbeSetName>,
  options: SidecarOptions,
  log: (line: string) => void,
): Promise<{ object: CollectorObject<ProbeSetName>; current: BpfPostmaster; pgssMax: number | null }> {
  // The queries map is sized from it, and a map's size is fixed when it is created: read first.
  const pgssMax = await pgStatStatementsMax(control);
  // Load (and so verify) the BPF object before touching the schema: a host that cannot run
  // the programs leaves the database as it found it.
  const loadStartedMs = performance.now();
  const object = CollectorObject.load({
    // The sets attached now; another set's programs are loaded (verified) when it is requested.
    preload: [...sets],
    // Only the sets run cannot do without (cpu): any other the kernel refuses is left out below.
    required: [...sets].filter((set) => PROBE_SETS[set].default && !PROBE_SETS[set].whereSupported),
    target,
    layout,
    probeSets: PROBE_SETS,
    rodata: familyRodata(target),
    maxBackends: options.maxBackends,
    maxQueries: options.maxQueries,
    pgStatStatementsMax: pgssMax,
    maxExcludedPids: options.maxExcludedPids,
    maxQueryChanges: options.maxQueryChanges,
    maxHistogramChanges: options.maxHistogramChanges,
    maxHistograms: options.maxHistograms,
    maxLockWaits: options.maxLockWaits,
    maxWaitEvents: options.maxWaitEvents,
    waitSlots: options.waitSlots,
    maxQueryKeysPerRole: options.maxQueryKeysPerRole,
    perfEvents: options.perfEvents,
    switchProgram: options.switchProgram,
  });
  try {
    const loadedMs = performance.now() - loadStartedMs;
    // Attached before the schema is looked at: figures count from the retarget below, while the
    // schema work runs (bench/journal/start-up.md#the-probes-before-the-schema-the-first-rows-at-once). Attaching creates nothing in the database; a
    // failure from here on detaches everything as the process ends. The collector's own
    // connections to this server are left out of the figures first.
    object.exclude(backendPid(control));
    if (localSink) object.exclude(backendPid(localSink));
    // The programs count nothing until retarget() names the postmaster, so they attach before it
    // is found: the program that finds it then joins sched_switch as a second probe and leaves
    // it without the RCU grace period a tracepoint waits for when its probes go 1 -> 0 -> 1
    // (10-20 ms of every start when the sets attached after it).
    for (const [set, refusal] of object.refused) log(`probe set ${set} is not supported here, collecting without it: ${refusal.text}`);
    const attaching = [...sets].filter((set) => !object.refused.has(set));
    for (const set of attaching) object.probes.attach(set);
    // The postmaster as BPF sees it (its host tgid), found before anything is created.
    const findStartedMs = performance.now();
    const current = await postmasterForBpf(object, target, options.connectionString);
    object.retarget(current);
    const loadMs = loadedMs + performance.now() - findStartedMs;
    log(
      `postmaster ${target.pgPid}${current.tgid !== target.pgPid ? ` (pid ${current.tgid} on the host, pid namespace level ${current.level})` : ''}: ` +
        `${target.binaryPath} (PostgreSQL ${target.majorVersion}), data ${target.dataDir}`,
    );
    // How long start-up took and its biggest part (bench/journal/start-up.md#start-up): a slow start says why.
    log(
      `attached probe sets: ${attaching.join(', ')} (${Math.round(process.uptime() * 1000)} ms after the process started, of which ${Math.round(loadMs)} ms loading the BPF programs)`,
    );
    return { object, current, pgssMax };
  } catch (error) {
    object.close();
    throw error;
  }
}

/** The writer's own backends, left out of the figures (hooks set once the sidecar exists). */
interface WriterBackends {
  /** Notices a restart first: it forgets the old postmaster's exclusions, not this one. */
  checkPostmaster: () => void;
  forgetExcluded: (pid: number, starts: bigint[]) => void;
}

/** Start-up step 5: the writer's one pinned connection, its backend excluded before it runs anything. */
function openWriter(
  options: SidecarOptions,
  node: string,
  local: boolean,
  excluder: CollectorObject<ProbeSetName>,
  ownBackends: WriterBackends,
  log: (line: string) => void,
): Kysely<BpfStatsDatabase> {
  const logOnce = rateLimited(log);
  const writerConfig = clientConfig(options.sink ?? options.connectionString);
  const pool = new pg.Pool(
    pinnedConfig({
      ...writerConfig,
      max: 1,
      application_name: 'pg-bpf-stats writer',
      // Kept open while idle (pg-pool closes idle clients after 10 s by default): a server with
      // nothing to write would otherwise see a new connection, and its exclusion, per flush sent.
      idleTimeoutMillis: 0,
      // Rows take their node from the session (the node column's default).
      // After the DSN's own options (the last -c wins), so neither is lost.
      // A lock wait is bounded: a role that holds a lock the flush needs in an open transaction
      // (an owner's maintenance, a migration; node roles can lock nothing above ROW EXCLUSIVE,
      // sql/95-sink-nodes.sql) makes the flush fail with a lock timeout; it goes out with the next
      // one (the increments stay in the maps), instead of hanging every flush, health row and
      // retention pass behind it. Ahead of the DSN's options, which may set another.
      options: [WRITER_LOCK_TIMEOUT, writerConfig.options, nodeConnectionOptions(node)].filter(Boolean).join(' '),
      // Before the pool hands a new connection out: its backend excluded, then its search_path
      // checked (a pooler that drops startup options must not get the writer's statements).
      // A failure ends it, one line is logged, and the flush fails; the next opens another.
      onConnect: pinnedOnConnect('writer', logOnce, (client) => {
        // pg-pool listens for errors on idle clients only; a socket that breaks mid-transaction
        // must fail that transaction (it does, through its promise), not kill the process.
        client.on('error', () => undefined);
        // A sink on another server: the writer's backend is none of the node's.
        if (!local) return;
        // The writer's own backend must not show up in the figures it writes: its pid comes with
        // the connection (BackendKeyData), so it is excluded before it runs anything.
        try {
          const pid = backendPid(client);
          // A restart is noticed first: it forgets the old postmaster's exclusions, not this one.
          ownBackends.checkPostmaster();
          ownBackends.forgetExcluded(pid, excluder.exclude(pid));
        } catch (error) {
          // Not excluded, it must not write.
          throw new Error(`cannot exclude its backend: ${oneLine(error)}`);
        }
      }),
    }),
  );
  pool.on('error', (error) => logOnce(`writer connection lost: ${oneLine(error)}`, 'writer connection lost'));
  // Statements sent again and again (every flush's) are parsed and planned once.
  return new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool: preparingPool(pool) }) });
}

/** Start-up step 6: the flush's parts (src/flush/flush-wiring.ts), the health row begun and the history's partitions made. */
async function startWriting(
  db: Kysely<BpfStatsDatabase>,
  object: CollectorObject<ProbeSetName>,
  target: PostmasterTarget,
  layout: StatusLayout,
  options: SidecarOptions,
  asNode: boolean,
  nodeClient: () => Promise<pg.Client>,
  ownBackends: WriterBackends,
): Promise<FlushWiring> {
  const log = options.log ?? (() => undefined);
  const writing = wireFlush(db, await QueryIncrements.resolve(db), object, target, layout, options, asNode, nodeClient);
  // Before the writer's first connection (the health row's): its exclusion reaches the rows.
  ownBackends.forgetExcluded = (pid, starts) => writing.rows.excluded(pid, starts);
  await writing.health.start();
  await writing.retention?.maintain(db);
  log(
    writing.retention?.asNode
      ? `history: increments per ${seconds(options.historyIntervalMs ?? DEFAULT_HISTORY_INTERVAL_MS)} kept as the sink keeps them (the owner's collector drops old partitions; partitions of the width in use there are made): a node role cannot drop or create tables of its own`
      : writing.retention
        ? `history: increments per ${seconds(options.historyIntervalMs ?? DEFAULT_HISTORY_INTERVAL_MS)} kept ${seconds(writing.retention.retentionMs)} in partitions of ${seconds(writing.retention.widthMs)}`
        : 'history: off (--history-retention off)',
  );
  log(`rows of exited backends, finished requests and stopped collectors kept ${seconds(writing.rowRetention.retentionMs)}`);
  return writing;
}

/** Start-up step 7, after the first flush: what this host supports, written where `check` would show it. */
async function recordCapabilities(
  support: SupportContext,
  pgssMax: number | null,
  store: pg.Client,
  log: (line: string) => void,
): Promise<void> {
  // The same checks as `pg-bpf-stats check`; the object above passed the verifier.
  const capabilities = await probeCapabilities({ support, loaded: true, pgStatStatementsMax: pgssMax });
  await writeCapabilities(clientDatabase(store), capabilities);
  // Said where it is seen, not only in a table: keys would be refused long before the maps fill.
  const memory = capabilities.find((line) => line.probe === 'memory limit');
  if (memory && !memory.ok) log(`memory limit: ${memory.detail}`);
}

function seconds(ms: number): string {
  return ms % 86_400_000 === 0 ? `${ms / 86_400_000} d` : ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : `${ms / 1000} s`;
}
