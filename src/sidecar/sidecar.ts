import type { ProgramName } from '../bpf/contract.js';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { CounterName } from '../bpf/counters.js';
import { probeCapabilities } from '../capabilities/probe-capabilities.js';
import { writeCapabilities } from '../capabilities/write-capabilities.js';
import { assertHostReady } from '../capabilities/host-checks.js';
import { CollectorObject, type BpfPostmaster } from '../collector/collector-object.js';
import type { PerfEventSpec } from '../collector/perf-events.js';
import type { MapFill } from '../collector/map-samples.js';
import type { MapSnapshot } from '../collector/map-snapshot.js';
import { ControlPlane } from '../control/control-plane.js';
import { oneLine, UserError } from '../errors.js';
import type { SupportContext } from '../families/family.js';
import { familyFlushParts, familyRodata, METRIC_COLUMNS, PROBE_SETS, type ProbeSetName } from '../families/index.js';
import { probeSetUnsupportedReason } from '../families/probe-set-support.js';
import { FlushWriter } from '../flush/flush-writer.js';
import type { HistogramRow } from '../flush/histogram-deltas.js';
import { HistogramsPart } from '../flush/histograms-part.js';
import { HealthPart } from '../health/health-part.js';
import { HistoryPart } from '../health/history-part.js';
import { DEFAULT_HISTORY_RETENTION_MS, HistoryRetention } from '../health/history-retention.js';
import { backendPid } from '../storage/backend-pid.js';
import { BackendStatsPart } from '../storage/backend-stats-part.js';
import { clientDatabase } from '../storage/client-database.js';
import { connect } from '../storage/connect.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { BackendRow, QueryRow } from '../storage/metric-row.js';
import { MetricRows } from '../storage/metric-rows.js';
import { migrateSchema } from '../storage/migrate-schema.js';
import { QueryStatsPart } from '../storage/query-stats-part.js';
import { LwlockTrancheNames } from '../target/lwlock-tranche-names.js';
import { calibrateStatusLayout } from '../target/calibrate-status-layout.js';
import { PostmasterFollower } from '../instance/postmaster-follower.js';
import { collectorApplicationName, lockServer } from '../instance/server-lock.js';
import { discoverPostmaster } from '../target/discover-postmaster.js';
import type { PostmasterTarget, StatusLayout } from '../target/postmaster-target.js';

/** The members of struct metrics every flush reads, in METRIC_COLUMNS order. */
const METRIC_FIELDS = METRIC_COLUMNS.map((c) => c.field);

export interface SidecarOptions {
  /** libpq DSN; undefined means the PG* environment variables. */
  connectionString?: string;
  /** Flush period. */
  intervalMs: number;
  /** Opt-in probe sets to attach besides the default ones. */
  probeSets?: ProbeSetName[];
  /** Replaces the perf events of perf-event programs (see CollectorObjectOptions.perfEvents). */
  perfEvents?: Partial<Record<ProgramName, PerfEventSpec>>;
  log?: (line: string) => void;
  /** History retention (default 7 days); null: no history is written. */
  historyRetentionMs?: number | null;
  /** History partition width (default: a seventh of the retention, 1 s to 1 day). */
  historyPartitionMs?: number;
  /** BPF map capacities (default 8192 each); small ones let tests force overflow. */
  maxBackends?: number;
  maxQueries?: number;
  /** Listen for bpf_stats.collect()/stop() requests (default true). */
  control?: boolean;
  /** How often the control plane looks for requests whose doorbell it missed (default 15 s). */
  controlPollMs?: number;
  /** How long to wait for a new postmaster after the one attached to is gone (default 60 s). */
  postmasterWaitMs?: number;
}

/** What the last flush did (for logs, tests, and later bpf_stats.health). */
export interface FlushStatus {
  at: Date;
  ms: number;
  queries: number;
  backends: number;
  error: string | null;
}

/**
 * What a flush wrote, for listeners (the Prometheus exporter): the increments of exactly the
 * rows committed (none when it failed), and what the BPF side looked like then.
 */
export interface FlushReport extends FlushStatus {
  queryRows: readonly QueryRow[];
  backendRows: readonly BackendRow[];
  histogramRows: readonly HistogramRow[];
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
  private stopped = false;
  /** While paused: the sets resume() attaches again. */
  private pausedSets: ProbeSetName[] | null = null;
  private control: pg.Client | null = null;
  /** The LISTEN/NOTIFY control plane (src/control/), when enabled. */
  controlPlane: ControlPlane | null = null;
  /** Sets attached at any time since the last flush: their columns are measured, not NULL. */
  private measuring = new Set<ProbeSetName>();
  private readonly overflow = new Map<string, bigint>();
  lastFlush: FlushStatus | null = null;
  private readonly flushListeners: Array<(report: FlushReport) => void> = [];
  /** Watches the postmaster and follows it across restarts. */
  follower: PostmasterFollower | null = null;
  /** Each restart followed: when (performance.now()), the new postmaster, the gap in ms. */
  readonly followed: Array<{ at: number; pgPid: number; gapMs: number; adoptedByBpf: boolean }> = [];
  private sweepUntil = 0;
  private closeVanishedDue = false;
  // Declared before `failed`, whose initializer assigns it.
  private fail: (error: UserError) => void = () => undefined;
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
    this.adoptControl(control);
    for (const set of object.probes.attached()) this.measuring.add(set);
  }

  static async start(options: SidecarOptions): Promise<Sidecar> {
    const log = options.log ?? (() => undefined);
    assertHostReady(options.probeSets);
    const control = await connect(options.connectionString, collectorApplicationName());
    let object: CollectorObject<ProbeSetName> | null = null;
    let db: Kysely<BpfStatsDatabase> | null = null;
    try {
      // Before anything is created: a second collector on this server refuses here.
      await lockServer(control);
      const target = await discoverPostmaster(control);
      const observer = await connect(options.connectionString);
      let layout: StatusLayout;
      try {
        layout = await calibrateStatusLayout(target, control, observer);
      } finally {
        await observer.end();
      }
      if (layout.queryIdOffset === null) log('query ids are not computed (compute_query_id = off): figures are per backend only');
      // Load (and so verify) the BPF object before touching the schema: a host that cannot run
      // the programs leaves the database as it found it.
      const support: SupportContext = { target, layout, perfEvents: options.perfEvents ?? {} };
      object = CollectorObject.load({
        target,
        layout,
        probeSets: PROBE_SETS,
        rodata: familyRodata(target),
        maxBackends: options.maxBackends,
        maxQueries: options.maxQueries,
        perfEvents: options.perfEvents,
      });
      // The postmaster as BPF sees it (its host tgid), found before anything is attached or created.
      const current = await postmasterForBpf(object, target, options.connectionString);
      object.retarget(current);
      log(
        `postmaster ${target.pgPid}${current.tgid !== target.pgPid ? ` (pid ${current.tgid} on the host, pid namespace level ${current.level})` : ''}: ` +
          `${target.binaryPath} (PostgreSQL ${target.majorVersion}), data ${target.dataDir}`,
      );
      await migrateSchema(control);
      // The same checks as `pg-bpf-stats check`; the object above just passed the verifier.
      await writeCapabilities(clientDatabase(control), await probeCapabilities({ support, loaded: true }));
      object.exclude(backendPid(control));
      const excluder = object;
      let checkPostmaster = (): void => undefined;
      const pool = new pg.Pool({ connectionString: options.connectionString, max: 1, application_name: 'pg-bpf-stats writer' });
      // The writer's own backend must not show up in the figures it writes: its pid comes with
      // the connection (BackendKeyData), so it is excluded before it runs anything.
      pool.on('connect', (client) => {
        // pg-pool listens for errors on idle clients only; a socket that breaks mid-transaction
        // must fail that transaction (it does, through its promise), not kill the process.
        client.on('error', () => undefined);
        const pid = backendPid(client);
        // A restart is noticed first: it forgets the old postmaster's exclusions, not this one.
        checkPostmaster();
        excluder.exclude(pid);
      });
      pool.on('error', (error) => log(`writer connection lost: ${oneLine(error)}`));
      db = new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool }) });
      const sets = new Set<ProbeSetName>([
        ...Object.values(PROBE_SETS).filter((s) => s.default).map((s) => s.name),
        ...(options.probeSets ?? []),
      ]);
      for (const set of sets) {
        // A default set marked whereSupported is left out where this host cannot run it (and said
        // so); any other set that cannot run here is an error from attach().
        const optional = PROBE_SETS[set].whereSupported && !options.probeSets?.includes(set);
        const reason = probeSetUnsupportedReason(set, support);
        if (reason && optional) {
          log(`probe set ${set} is not supported here, collecting without it: ${reason}`);
          sets.delete(set);
        } else if (reason) throw new UserError(`probe set ${set} is not supported here: ${reason}`);
        else object.probes.attach(set);
      }
      log(`attached probe sets: ${[...sets].join(', ')}`);

      const writing = flushParts(db, object, target, options);
      await writing.health.start();
      await writing.retention?.maintain(db);
      log(
        writing.retention
          ? `history: each flush's increments kept ${seconds(writing.retention.retentionMs)} in partitions of ${seconds(writing.retention.widthMs)}`
          : 'history: off (--history-retention off)',
      );
      const sidecar = new Sidecar(options, target, layout, object, support, db, control, writing);
      sidecar.follow(current);
      checkPostmaster = () => sidecar.follower?.check();
      await sidecar.markVanishedBackends();
      sidecar.timer = setInterval(() => void sidecar.flush(), options.intervalMs);
      if (options.control ?? true) {
        try {
          sidecar.controlPlane = await ControlPlane.start({ connectionString: options.connectionString, host: sidecar, log, pollMs: options.controlPollMs });
        } catch (error) {
          await sidecar.stop();
          throw error;
        }
      }
      return sidecar;
    } catch (error) {
      object?.close();
      await db?.destroy().catch(() => undefined);
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
    this.timer = setInterval(() => void this.flush(), this.options.intervalMs);
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
    this.follower?.check();
    this.object.exclude(pid);
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

  /** Writes what was collected since the last flush; concurrent calls share one flush. */
  flush(): Promise<FlushStatus> {
    this.flushing ??= this.flushOnce().finally(() => (this.flushing = null));
    return this.flushing;
  }

  /** One flush: the maps are read once, every part prepares from that, one statement writes it all. */
  private async flushOnce(): Promise<FlushStatus> {
    const started = performance.now();
    const at = new Date();
    const { rows, writer, health, retention, histograms } = this.writing;
    let maps: MapSnapshot | null = null;
    try {
      // After a restart the control session (and the server lock it held) is gone: take both again.
      if (!this.control && !this.stopped) await this.controlClient();
      // After a crash, backends of the old postmaster exit as orphans, out of BPF's sight.
      if (performance.now() < this.sweepUntil) this.object.markExitedGone();
      const measured = new Set([...this.measuring, ...this.object.probes.attached()]);
      maps = this.object.maps.snapshot(METRIC_FIELDS);
      this.reportOverflow(maps.counters);
      // pg_stat_activity is asked only when a backend we cannot name yet appeared.
      if (rows.needsNames(maps)) await this.refreshBackendTypes();
      await retention?.maintainWhenDue(this.db, this.options.log ?? (() => undefined));
      await writer.write({ maps, measured, startedMs: started });
      // After a restart: rows of the old postmaster's processes this run never tracked (asleep
      // since before it attached) are closed as at start-up.
      if (this.closeVanishedDue) {
        await this.markVanishedBackends();
        this.closeVanishedDue = false;
      }
      const written = rows.prepare(maps, measured);
      this.measuring = new Set(this.object.probes.attached());
      this.lastFlush = { at, ms: performance.now() - started, queries: written.queries.length, backends: written.backends.length, error: null };
      if (this.flushListeners.length) {
        this.report({ ...this.lastFlush, queryRows: written.queries, backendRows: written.backends, histogramRows: histograms.lastCommitted, counters: maps.counters, fill: maps.fill, attached: this.object.probes.attached() });
      }
    } catch (error) {
      // Nothing was committed: the same increments go out with the next flush.
      const repeated = this.lastFlush?.error === oneLine(error);
      this.lastFlush = { at, ms: performance.now() - started, queries: 0, backends: 0, error: oneLine(error) };
      // One line per distinct failure, not one per interval while the database is away.
      if (!repeated) this.options.log?.(`flush failed, will retry every interval: ${this.lastFlush.error}`);
      // A missing partition (a clock jump, a long pause) must not wait for the next period.
      retention?.soon();
      await health.failed(oneLine(error));
      if (this.flushListeners.length) {
        this.report({ ...this.lastFlush, queryRows: [], backendRows: [], histogramRows: [], counters: maps?.counters ?? {}, fill: maps?.fill ?? [], attached: this.object.probes.attached() });
      }
    }
    return this.lastFlush;
  }

  /** Detaches every probe, writes what is left, and closes connections. */
  async stop(): Promise<void> {
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
    await this.writing.health.stopped();
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
    this.object.exclude(pid);
    try {
      // The server released the lock with the old session: take it again, or give way.
      await lockServer(client);
    } catch (error) {
      await client.end().catch(() => undefined);
      if (error instanceof UserError) this.fail(error);
      throw error;
    }
    this.adoptControl(client);
    return client;
  }

  /**
   * Follows the postmaster across restarts (src/instance/postmaster-follower.ts): the BPF
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
        log(`following postmaster ${target.pgPid} (pid ${current.tgid} for BPF${adoptedByBpf ? ', adopted by BPF at its first fork' : ''}), ${Math.round(gapMs)} ms after the old one was gone`);
        this.followed.push({ at: performance.now(), pgPid: target.pgPid, gapMs, adoptedByBpf });
      },
      onLost: (error) => this.fail(error),
    });
    this.follower.start();
  }

  private adoptControl(client: pg.Client): void {
    const drop = () => {
      if (this.control === client) this.control = null;
    };
    client.on('error', (error) => {
      this.options.log?.(`control connection lost: ${oneLine(error)}`);
      drop();
    });
    client.on('end', drop);
    this.control = client;
  }

  private async refreshBackendTypes(): Promise<void> {
    const client = await this.controlClient();
    try {
      const { rows } = await client.query<{ pid: number; backend_type: string }>('SELECT pid, backend_type FROM pg_stat_activity');
      for (const row of rows) this.writing.rows.backendTypes.observe(row.pid, row.backend_type);
    } catch (error) {
      if (this.control === client) this.control = null;
      await client.end().catch(() => undefined);
      throw error;
    }
  }

  /** Logs when a BPF map overflowed since the last flush (bpf_stats.health will show it too). */
  private reportOverflow(counters: Record<CounterName, bigint>): void {
    for (const [name, value] of Object.entries(counters)) {
      const before = this.overflow.get(name) ?? 0n;
      if (value > before) this.options.log?.(`${name}: ${value - before} times since the last flush (${COUNTER_MEANING[name as CounterName]})`);
      this.overflow.set(name, value);
    }
  }

  /** Backends a previous run left open that are gone now were not seen exiting: close them. */
  private async markVanishedBackends(): Promise<void> {
    await this.db
      .updateTable('bpf_stats.backend_stats as b')
      .set((eb) => ({ exited_at: eb.ref('b.last_seen') }))
      .where('b.exited_at', 'is', null)
      .where(({ not, exists }) =>
        not(exists(sql`(SELECT 1 FROM pg_stat_activity a WHERE a.pid = b.pid AND a.backend_start = b.backend_start)`)),
      )
      // these never appear in pg_stat_activity
      .where('b.backend_type', 'not in', ['postmaster', 'postmaster child'])
      .execute();
  }
}

const FINAL_FLUSH_ATTEMPTS = 3;
const DEFAULT_POSTMASTER_WAIT_MS = 60_000;
/** How long after a restart orphans of the old postmaster are looked for (they exit once they notice). */
const ORPHAN_SWEEP_MS = 30_000;

/**
 * The postmaster's tgid as BPF sees it (and its pid namespace's level): known from /proc on the
 * host, found through BPF from inside a container's pid namespace. A UserError when it cannot
 * be found: nothing is created then.
 */
async function postmasterForBpf(object: CollectorObject<ProbeSetName>, target: PostmasterTarget, connectionString: string | undefined): Promise<BpfPostmaster> {
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
  return { ...found, myBEEntry: target.addresses.myBEEntry, myWaitEventInfo: target.addresses.myWaitEventInfo };
}

const COUNTER_MEANING: Record<CounterName, string> = {
  backends_full: 'a process could not be tracked: backends map full',
  queries_full: 'a query key could not be added: queries map full; its time counts per backend only',
  status_unreadable: "a backend's PgBackendStatus could not be read; its time counts per backend only",
  histograms_full: 'a histogram could not be added: histograms map full; its observations are lost',
  lock_waits_full: 'a lock wait could not be added: lock_waits map full; its wait counts in lock_wait_ms only',
  lwlock_waits_full: 'an LWLock wait could not be added: lwlock_waits map full; its wait counts in lwlock_wait_ms only',
  mem_stalls_full: 'a reclaim or compaction stall could not be timed: mem_stalls map full',
  io_inflight_full: "a block request's owner could not be kept: io_inflight map full; its IO is not attributed",
  aio_handles_full: "an IO handle's owner could not be kept: aio_handles map full; an io worker's IO for it counts for the worker only",
  io_completions_missed: 'a block request completed while BPF was disabled on that CPU (a bpf() call or kprobe ran there): charged when its request was reused, without latency',
  memio_untracked: 'a stall or block request of a process not tracked yet (no context switch since attach): its query got it, its backend row may not',
};

/** What every flush writes with: the metric rows its parts share, the writer, and health and history's own handles. */
interface FlushWiring {
  rows: MetricRows;
  writer: FlushWriter<BpfStatsDatabase>;
  health: HealthPart;
  retention: HistoryRetention | null;
  histograms: HistogramsPart;
}

/** The parts of every flush, in the order their statements run. */
function flushParts(db: Kysely<BpfStatsDatabase>, object: CollectorObject<ProbeSetName>, target: PostmasterTarget, options: SidecarOptions): FlushWiring {
  const rows = new MetricRows(target.pgPid, (pids) => object.deleteBackends(pids));
  const retentionMs = options.historyRetentionMs === undefined ? DEFAULT_HISTORY_RETENTION_MS : options.historyRetentionMs;
  const retention = retentionMs === null ? null : new HistoryRetention(retentionMs, options.historyPartitionMs);
  // A getter: the postmaster's pid changes when it restarts (target is updated in place).
  const health = new HealthPart(db, rows, { get postmasterPid() { return target.pgPid; }, intervalMs: options.intervalMs, probeSets: () => object.probes.attached(), historyRetentionMs: retentionMs });
  const histograms = new HistogramsPart();
  const writer = new FlushWriter(db, [
    new QueryStatsPart(db, rows),
    new BackendStatsPart(db, rows),
    histograms,
    ...familyFlushParts({ target, trancheNames: new LwlockTrancheNames(target.pid, target.binaryPath, target.mappedPath) }),
    ...(retention ? [new HistoryPart(db, rows)] : []),
    health,
  ]);
  return { rows, writer, health, retention, histograms };
}

function seconds(ms: number): string {
  return ms % 86_400_000 === 0 ? `${ms / 86_400_000} d` : ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : `${ms / 1000} s`;
}
