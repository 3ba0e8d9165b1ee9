import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { PostgresGlobals } from '../postmaster/postmaster-target.js';
import { PostmasterTgidValue, Structs, type FieldOf, type MapName, type ProgramName, type RodataName } from '../bpf/contract.js';
import { RecordLayout } from '../bpf/record-layout.js';
import { namespaceOf, procPidsFor, type NamespaceId } from '../postmaster/pid-namespace.js';
import { UserError } from '../errors.js';
import { isNativeError, loadNative } from '../native/bpf-native.js';
import { packageRoot } from '../package-root.js';
import type { PostmasterTarget, StatusLayout } from '../postmaster/postmaster-target.js';
import { disableMissingTracepoints } from './disable-missing-tracepoints.js';
import { markExitedWhilePaused } from './exited-while-paused.js';
import { KernelFeatures } from './kernel-features.js';
import { LoadedPrograms } from './loaded-programs.js';
import { MapReaders } from './map-readers.js';
import type { BackendRecordRef } from './map-samples.js';
import { ObjectGlobals } from './object-globals.js';
import type { PerfEventSpec } from './perf-events.js';
import { possibleSetPrograms, setPrograms, type AttachableSet } from './probe-attachment.js';
import { loadRefusing, type VerifierRefusal } from './verifier-refusal.js';
import { ProbeAttachments } from './probe-attachments.js';
import { queryMapEntries, roleGuardFill } from './query-capacity.js';
import { statusSpan } from './status-span.js';
import { otherSwitchProgramsOff, switchProgram, withSwitchProgram, type SwitchProgram } from './switch-program.js';
import { markTrackingStart } from './tracking-start.js';

export interface CollectorObjectOptions<Name extends string> {
  target: PostmasterTarget;
  layout: StatusLayout;
  /** Every probe set the object can attach, by name (src/families/). */
  probeSets: Readonly<Record<Name, AttachableSet<Name>>>;
  /**
   * The sets whose programs are loaded with the object (default: all). The others' are loaded
   * when they are first attached (LoadedPrograms): a start verifies only what it attaches.
   */
  preload?: readonly Name[];
  /**
   * Sets the collector cannot run without: a program of theirs the kernel refuses fails the load
   * (a UserError). Any other set's refused program leaves that set out (`refused`).
   */
  required?: readonly Name[];
  /** Settings the families add to the object's own (e.g. the lock programs' per-version ones). */
  rodata?: Partial<Record<RodataName, number | bigint>>;
  /** Map capacities: backends tracked at once, distinct query keys (default: from pgStatStatementsMax, query-capacity.ts). */
  maxBackends?: number;
  maxQueries?: number;
  /** The server's pg_stat_statements.max, read before load (null: pgss not loaded); sizes the queries map. */
  pgStatStatementsMax?: number | null;
  /** Query keys one role may hold once the map is 7/8 full (default half of maxQueries; 0: no limit). */
  maxQueryKeysPerRole?: number;
  /** Capacity of histograms, (query, kind) pairs held at once (default: histogramCapacity() of this host's CPUs). */
  maxHistograms?: number;
  /** Capacity of query_wait_events, backend_wait_events and query_wait_blockers (default 8192 each; tests shrink it). */
  maxWaitEvents?: number;
  /** Wait events a process's record (at most 4) and a query's entry on a CPU (at most 2) count before the wait-event maps have the rest (default: the most; tests set 0). */
  waitSlots?: number;
  /** Capacity of lock_waits and of lwlock_waits, (query, lock) pairs held at once (default 4096; tests shrink it). */
  maxLockWaits?: number;
  /** Capacity of excluded_pids, the collector's own live connections (default 256; tests shrink it). */
  maxExcludedPids?: number;
  /** Capacity of query_changes, the keys changed since the last read (default maxQueries; tests shrink it to make it overflow). */
  maxQueryChanges?: number;
  /** Capacity of hist_changes, the histograms changed since the last read (default: the histograms map's; tests shrink it). */
  maxHistogramChanges?: number;
  /**
   * Replaces the perf event a perf-event program is attached to (by program name): for hosts
   * whose PMU names its LLC events differently, and for tests that prove the path with a
   * software event on a host without a PMU.
   */
  perfEvents?: Partial<Record<ProgramName, PerfEventSpec>>;
  /**
   * The switch-out program (default: the one this kernel's sched_switch takes, switchProgram()).
   * Tests name on_switch_3args to run the fallback for pre-5.18 kernels on a newer one, where it
   * loads and attaches as well.
   */
  switchProgram?: SwitchProgram;
}

/*
 * The histograms map is preallocated (allocated on demand it once lost a COPY's only latency
 * observation: bench/journal/preallocated-maps.md#refusals-a-full-map-or-no-memory-with-room-left) and per-CPU: each
 * entry costs sizeof(struct hist) on every possible CPU,
 * 17.0 kB on 64 CPUs. Its capacity is what fits in this much kernel memory, within bounds: the
 * map holds the histograms active in the last few flushes (quiet ones are evicted), not every
 * statement seen.
 */
const HISTOGRAMS_MEMORY_BYTES = 32 * 1024 * 1024;
const HISTOGRAMS_MIN = 1024;
const HISTOGRAMS_MAX = 8192;

/** The histograms map's default capacity on a host with `cpus` possible CPUs. */
export function histogramCapacity(cpus: number): number {
  const perEntry = Math.ceil(Structs.hist.size / 8) * 8 * cpus;
  return Math.max(HISTOGRAMS_MIN, Math.min(HISTOGRAMS_MAX, Math.floor(HISTOGRAMS_MEMORY_BYTES / perEntry)));
}

/**
 * The maps load() sizes, and the capacity each gets unless an option says otherwise, on a host
 * with `cpus` possible CPUs and a server whose pg_stat_statements.max is `pgssMax` (null: not loaded).
 */
export function defaultMapEntries(cpus: number, pgssMax: number | null = null): Record<SizedMap, number> {
  const histograms = histogramCapacity(cpus);
  const queries = queryMapEntries(pgssMax);
  return {
    backends: 8192,
    exited_backends: 8192,
    queries,
    // Every key of queries can change between two reads: the set of changed ones holds them all.
    query_changes: queries,
    // One overflow slot per task at most, as many as backends are tracked (bpf/attribution.bpf.h).
    query_overflow: 8192,
    excluded_pids: 256,
    histograms,
    // Every histogram can change between two reads: the set of changed ones holds them all.
    hist_changes: histograms,
    lock_waits: 4096,
    lwlock_waits: 4096,
    // A query has a few wait events at a time (src/families/waits/); quiet keys are evicted.
    query_wait_events: 8192,
    // Each live backend a few events (idle, latches, IO); exited backends' keys go quiet and are evicted.
    backend_wait_events: 8192,
    // The blockers set: a few wakers per (query, wait event); quiet keys are evicted.
    query_wait_blockers: 8192,
  };
}

/** Names of the object's maps (a misspelt one drops out, and load() using it does not compile). */
type SizedMap = Extract<
  MapName,
  | 'backends'
  | 'exited_backends'
  | 'queries'
  | 'query_changes'
  | 'query_overflow'
  | 'excluded_pids'
  | 'histograms'
  | 'hist_changes'
  | 'lock_waits'
  | 'lwlock_waits'
  | 'query_wait_events'
  | 'backend_wait_events'
  | 'query_wait_blockers'
>;

/** How long one of our connections can have taken from its start to its exclusion, at most (deleteExitedRecordsOf). */
const OWN_CONNECT_NS = 30_000_000_000n;

/** A postmaster as the BPF programs filter on it (CollectorObject.retarget). */
export interface BpfPostmaster extends PostgresGlobals {
  /** Its tgid in the initial pid namespace (what BPF sees). */
  tgid: number;
  /** Its pid namespace's level (0: the host's). */
  level: number;
}

/**
 * Loads the object. The verifier gives up with EAGAIN when a signal is pending (kernel commit
 * c3494801cd17, "bpf: check pending signals while verifying programs") and libbpf retries only a
 * few times: a process signalled that often (a sampling profiler, node --cpu-prof) cannot load.
 * That is the environment, said in one line, not a bug of ours.
 */
function loadInterruptible(object: CollectorBpfObject): void {
  try {
    object.load();
  } catch (error) {
    if (isNativeError(error) && error.code === 'EAGAIN') {
      throw new UserError(
        'loading the BPF programs was interrupted: the kernel verifier stops when a signal is pending, and this process is signalled too often (a profiler such as node --cpu-prof, or a debugger); run it without that',
      );
    }
    throw error;
  }
}

/** The programs the object attaches itself (to find and follow the postmaster), whatever sets are attached. */
const OWN_PROGRAMS: readonly ProgramName[] = ['find_postmaster', 'on_postmaster_exit', 'adopt_postmaster'];

/** Loads `programs` and no other (of those not already turned off). */
function loadOnly(object: CollectorBpfObject, programs: readonly ProgramName[]): void {
  const keep = new Set(programs);
  for (const p of object.programs()) {
    if (p.autoload && !keep.has(p.name as ProgramName)) object.setAutoload(p.name as ProgramName, false);
  }
}

/**
 * A new instance of the collector object, configured for `options` and ready to load: its
 * settings, map sizes, and the programs of the candidate sets not left out (with the object's
 * own; without a preload list, every program but those only the sets left out use).
 */
function configuredObject<Name extends string>(
  options: CollectorObjectOptions<Name> & { switchProgram: SwitchProgram },
  candidates: ReadonlyMap<Name, readonly ProgramName[]>,
  leftOut: ReadonlyMap<Name, unknown>,
): CollectorBpfObject {
  const object = openCollectorObject();
  try {
    const { layout } = options;
    const span = statusSpan(layout);
    const entries = defaultMapEntries(loadNative().numPossibleCpus(), options.pgStatStatementsMax ?? null);
    const maxQueries = options.maxQueries ?? entries.queries;
    new ObjectGlobals(object).writeRodata({
      status_procpid_off: layout.procpidOffset,
      status_backend_type_off: layout.backendTypeOffset,
      status_proc_start_off: layout.procStartOffset,
      status_dbid_off: layout.dbidOffset,
      status_userid_off: layout.useridOffset,
      status_query_id_off: layout.queryIdOffset ?? 0,
      client_read_event: layout.clientReadEvent,
      client_backend_type: layout.clientBackendType,
      ...options.rodata,
      ...(options.waitSlots === undefined ? {} : { wait_slots_used: options.waitSlots }),
      jiffy_ns: jiffyNs(),
      status_activity_start_off: layout.activityStartOffset ?? 0,
      status_activity_raw_off: layout.activityRawOffset ?? 0,
      status_state_off: layout.stateOffset ?? 0,
      status_state_idle: layout.stateIdle,
      status_span_off: span.offset,
      status_span_len: span.length,
      status_xact_start_before: layout.xactStartBeforeActivity ? 1 : 0,
      // Once the map is 7/8 full, a role holding half of it is refused new keys: the rest
      // stays for everyone else (bpf/attribution.bpf.h).
      max_query_keys_per_role: options.maxQueryKeysPerRole ?? Math.floor(maxQueries / 2),
      query_keys_guard_fill: roleGuardFill(maxQueries),
    });
    disableMissingTracepoints(object, KernelFeatures.host());
    otherSwitchProgramsOff(object, options.switchProgram);
    const kept = [...candidates.keys()].filter((set) => !leftOut.has(set));
    if (options.preload) {
      // The programs each set attaches on this target (USDT or uprobes, ...), no more.
      loadOnly(object, [...OWN_PROGRAMS, ...kept.flatMap((set) => programsOn(options.probeSets[set], options.target))]);
    } else {
      const needed = new Set(kept.flatMap((set) => candidates.get(set) ?? []));
      leaveOut(
        object,
        [...leftOut.keys()].flatMap((set) => candidates.get(set) ?? []).filter((p) => !needed.has(p)),
      );
    }
    object.setMaxEntries('backends', options.maxBackends ?? entries.backends);
    object.setMaxEntries('exited_backends', options.maxBackends ?? entries.exited_backends);
    object.setMaxEntries('queries', maxQueries);
    object.setMaxEntries('query_changes', options.maxQueryChanges ?? options.maxQueries ?? entries.query_changes);
    object.setMaxEntries('query_overflow', options.maxBackends ?? entries.query_overflow);
    object.setMaxEntries('excluded_pids', options.maxExcludedPids ?? entries.excluded_pids);
    const histograms = options.maxHistograms ?? entries.histograms;
    object.setMaxEntries('histograms', histograms);
    object.setMaxEntries('hist_changes', options.maxHistogramChanges ?? histograms);
    object.setMaxEntries('lock_waits', options.maxLockWaits ?? entries.lock_waits);
    object.setMaxEntries('lwlock_waits', options.maxLockWaits ?? entries.lwlock_waits);
    object.setMaxEntries('query_wait_events', options.maxWaitEvents ?? entries.query_wait_events);
    object.setMaxEntries('backend_wait_events', options.maxWaitEvents ?? entries.backend_wait_events);
    object.setMaxEntries('query_wait_blockers', options.maxWaitEvents ?? entries.query_wait_blockers);
    return object;
  } catch (error) {
    object.close();
    throw error;
  }
}

/** The programs a set attaches on `target`; none when its probes cannot be chosen there (it is not attached then). */
function programsOn(set: AttachableSet, target: PostmasterTarget): ProgramName[] {
  try {
    return setPrograms(set, target);
  } catch {
    return [];
  }
}

/** Turns off `programs` (those still on). */
function leaveOut(object: CollectorBpfObject, programs: readonly ProgramName[]): void {
  const off = new Set(programs);
  for (const p of object.programs()) if (p.autoload && off.has(p.name as ProgramName)) object.setAutoload(p.name as ProgramName, false);
}

/** A new, unloaded instance of the collector object. */
function openCollectorObject(): CollectorBpfObject {
  return new (loadNative().BpfObject)(collectorObjectPath());
}

/** Path of the compiled collector object (shipped in the npm package); a UserError saying what to do when it is missing. */
export function collectorObjectPath(): string {
  const path = join(packageRoot(), 'build', 'bpf', 'pgstats.bpf.o');
  if (!existsSync(path)) {
    throw new UserError(
      `the BPF object ${path} is missing: install pg-bpf-stats from its npm package, which ships it, or build it with npm run build (needs clang and bpftool)`,
    );
  }
  return path;
}

/**
 * The loaded collector BPF object (bpf/pgstats.bpf.c), configured for one postmaster. Loading
 * and closing are here; attaching probe sets is `probes`, reading the maps is `maps`.
 *
 * @example
 * const obj = CollectorObject.load({ target, layout, probeSets: PROBE_SETS });
 * obj.probes.attach('cpu');
 * const snapshot = obj.maps.snapshot(['on_cpu_ns', 'runq_ns']);
 * obj.close();
 */
export class CollectorObject<Name extends string = string> {
  readonly probes: ProbeAttachments<Name>;
  readonly maps: MapReaders;
  private closed = false;

  private readonly backendLayout: RecordLayout<FieldOf<'backend_record'>>;

  private readonly programs: LoadedPrograms;

  private constructor(
    private readonly object: CollectorBpfObject,
    private readonly globals: ObjectGlobals,
    private readonly options: CollectorObjectOptions<Name>,
    /**
     * The sets whose programs this kernel refused, each with the refusal: at load, and when an
     * opt-in set's programs were loaded for its first attach. A refused set is never attached.
     */
    readonly refused: Map<Name, VerifierRefusal>,
  ) {
    this.maps = new MapReaders(object, globals, loadNative().numPossibleCpus());
    this.backendLayout = RecordLayout.of('backend_record', object.mapLayout('backends').value);
    this.programs = new LoadedPrograms(object, openCollectorObject, (more) => {
      loadInterruptible(more);
      // The load parsed the kernel's BTF into memory it has freed: give it back (RSS;
      // bench/journal/memory.md#memory-after-start).
      loadNative().releaseFreeMemory();
    });
    this.probes = new ProbeAttachments(
      object,
      this.programs,
      globals,
      this.maps,
      options.target,
      options.probeSets,
      options.perfEvents ?? {},
      refused,
    );
  }

  /** The switch-out program this object loaded (src/collector/switch-program.ts): what the cpu set attaches to sched_switch. */
  get switchProgram(): SwitchProgram {
    return this.options.switchProgram ?? 'on_sched_switch';
  }

  static load<Name extends string>(given: CollectorObjectOptions<Name>): CollectorObject<Name> {
    // The one seam of the two switch-out programs: from here on the sets name the one chosen.
    const chosen = given.switchProgram ?? switchProgram(KernelFeatures.host());
    const options = { ...given, switchProgram: chosen, probeSets: withSwitchProgram(given.probeSets, chosen) };
    // The sets whose programs load now, each with every program it may attach.
    const candidates = new Map<Name, ProgramName[]>(
      (options.preload ?? (Object.keys(options.probeSets) as Name[])).map((set) => [set, possibleSetPrograms(options.probeSets[set])]),
    );
    const required = new Set<Name>(options.required ?? []);
    // A set whose program this kernel refuses is left out, and the object loaded again without it.
    const { object, refused } = loadRefusing<Name, CollectorBpfObject>(
      (leftOut) => configuredObject(options, candidates, leftOut),
      loadInterruptible,
      (program) => [...candidates].filter(([, programs]) => programs.includes(program as ProgramName)).map(([set]) => set),
      (set) => required.has(set),
    );
    try {
      const globals = new ObjectGlobals(object);
      markTrackingStart(globals);
      // Nothing is attached yet; the filter matches nothing until retarget() names the postmaster.
      globals.writeBss('postmaster_tgid', BigInt(PostmasterTgidValue.NO_POSTMASTER));
      return new CollectorObject(object, globals, options, refused);
    } catch (error) {
      object.close();
      throw error;
    }
  }

  /**
   * Leaves one of the collector's own backends out of every figure, for as long as it lives;
   * `pid` as Postgres knows it (BackendKeyData). Its entry goes at its final context switch
   * (bpf/cpu.bpf.h), or at the next forgetGoneExclusions() when it died before that could
   * happen. Throws when the set is full of live connections. Returns the start (task_start_ns)
   * of each record of that pid it dropped: what was counted before the exclusion arrived.
   */
  exclude(pid: number): bigint[] {
    const key = pidKey(pid);
    try {
      this.object.mapUpdate('excluded_pids', key, Buffer.from([1]));
    } catch {
      // Full: entries of pids that are gone may still be there (died before their exclusion).
      this.forgetGoneExclusions();
      this.object.mapUpdate('excluded_pids', key, Buffer.from([1]));
    }
    // A record made before the exclusion is dropped; the next switch re-creates it excluded.
    // Records are keyed by the kernel's pid, which differs in a container: found by pg_pid.
    return [...this.deleteRecordsOf(pid), ...this.deleteExitedRecordsOf(pid)].map((r) => r.taskStartNs);
  }

  /**
   * The records of `pgPid` already retired to exited_backends: a connection of ours terminated
   * right after it started (its pid reached us, its exclusion not yet) exits before exclude()
   * runs, and its record waits there to be written. Only processes started in the last
   * OWN_CONNECT_NS: an older one under the same pid is another process's, whose final figures stay.
   */
  private deleteExitedRecordsOf(pgPid: number): Array<{ taskStartNs: bigint }> {
    const batch = this.object.mapLookupBatch('exited_backends');
    const since = process.hrtime.bigint() - OWN_CONNECT_NS; // CLOCK_MONOTONIC, as task_start_ns
    const deleted: Array<{ taskStartNs: bigint }> = [];
    for (let i = 0; i < batch.count; i++) {
      const at = i * batch.valueSize;
      if (this.backendLayout.int(batch.values, at, 'pg_pid') !== BigInt(pgPid)) continue;
      const taskStartNs = this.backendLayout.int(batch.values, at, 'task_start_ns');
      if (taskStartNs < since) continue;
      this.object.mapDelete('exited_backends', batch.keys.subarray(i * batch.keySize, (i + 1) * batch.keySize));
      deleted.push({ taskStartNs });
    }
    return deleted;
  }

  /** Deletes the records of a pid as Postgres knows it (the map is keyed by the kernel's pid, which differs in a container). */
  private deleteRecordsOf(pgPid: number): Array<{ key: number; taskStartNs: bigint }> {
    const batch = this.object.mapLookupBatch('backends');
    const deleted: Array<{ key: number; taskStartNs: bigint }> = [];
    for (let i = 0; i < batch.count; i++) {
      const at = i * batch.valueSize;
      if (this.backendLayout.int(batch.values, at, 'pg_pid') !== BigInt(pgPid)) continue;
      const key = batch.keys.subarray(i * batch.keySize, (i + 1) * batch.keySize);
      deleted.push({ key: key.readUInt32LE(0), taskStartNs: this.backendLayout.int(batch.values, at, 'task_start_ns') });
      this.object.mapDelete('backends', key);
    }
    return deleted;
  }

  /**
   * Points every program at a postmaster: its tgid as BPF sees it, its pid namespace's level,
   * and where its children keep MyBEEntry and my_wait_event_info. At start-up before anything
   * is attached, and when the postmaster restarts (null meanwhile: nothing matches).
   */
  retarget(to: BpfPostmaster | null): void {
    if (!to) {
      this.globals.writeBss('postmaster_tgid', BigInt(PostmasterTgidValue.NO_POSTMASTER));
      this.forgetExcluded();
      return;
    }
    this.globals.writeBss('pidns_level', BigInt(to.level));
    this.globals.writeBss('my_be_entry_addr', to.myBEEntry);
    this.globals.writeBss('my_wait_event_info_addr', to.myWaitEventInfo);
    this.globals.writeBss('outer_user_id_addr', to.outerUserId);
    this.globals.writeBss('current_user_id_addr', to.currentUserId);
    this.globals.writeBss('active_portal_addr', to.activePortal);
    this.globals.writeBss('postmaster_tgid', BigInt(to.tgid));
  }

  /**
   * Lets BPF follow the postmaster by itself (bpf/instance.bpf.h): the filter goes to nothing
   * when it exits, and to its successor at the successor's first fork. `like`: the binary's and
   * data directory's device (the kernel's dev_t) and inode, and the text start (mm->start_code)
   * of the postmaster the current addresses belong to (0: unknown, no adoption). Returns what
   * stops it.
   */
  followPostmaster(like: { exe: NamespaceId; dir: NamespaceId; startCode: bigint }): () => void {
    this.globals.writeBss('follow_exe_dev', like.exe.dev);
    this.globals.writeBss('follow_dir_dev', like.dir.dev);
    this.globals.writeBss('follow_dir_ino', like.dir.ino);
    this.globals.writeBss('follow_start_code', like.startCode);
    this.globals.writeBss('follow_exe_ino', like.startCode ? like.exe.ino : 0n);
    const links = [this.object.attach('on_postmaster_exit'), this.object.attach('adopt_postmaster')];
    return () => {
      for (const link of links) link.destroy();
    };
  }

  /** Our connections went with the old postmaster; their pids will be reused by its successor's backends. */
  forgetExcluded(): void {
    this.maps.clear('excluded_pids');
  }

  /** The tgid the filter matches now (BPF may change it, followPostmaster); null: nothing. */
  bpfPostmasterTgid(): number | null {
    const tgid = Number(this.globals.readBss('postmaster_tgid'));
    return tgid === PostmasterTgidValue.NO_POSTMASTER ? null : tgid;
  }

  /** What the filter points at now (BPF may have changed it, followPostmaster); null: nothing. */
  bpfPostmaster(): BpfPostmaster | null {
    const tgid = Number(this.globals.readBss('postmaster_tgid'));
    if (tgid === PostmasterTgidValue.NO_POSTMASTER) return null;
    return {
      tgid,
      level: Number(this.globals.readBss('pidns_level')),
      myBEEntry: this.globals.readBss('my_be_entry_addr'),
      myWaitEventInfo: this.globals.readBss('my_wait_event_info_addr'),
      outerUserId: this.globals.readBss('outer_user_id_addr'),
      currentUserId: this.globals.readBss('current_user_id_addr'),
      activePortal: this.globals.readBss('active_portal_addr'),
    };
  }

  /**
   * The tgid BPF knows a process by, and its pid namespace's level, from what a collector in any
   * pid namespace can see: the namespace (nsfs device and inode of /proc/<pid>/ns/pid) and the
   * pid there (bpf/instance.bpf.h). `wake` makes the process leave its CPU (the postmaster
   * forks for a new connection); null when it did not within `timeoutMs`.
   */
  async findTgid(
    seek: { dev: bigint; ino: bigint; tgid: number },
    wake: () => Promise<void>,
    timeoutMs = 3000,
  ): Promise<{ tgid: number; level: number } | null> {
    this.globals.writeBss('found_tgid', 0n);
    this.globals.writeBss('seek_pidns_dev', seek.dev);
    this.globals.writeBss('seek_pidns_ino', seek.ino);
    this.globals.writeBss('seek_tgid', BigInt(seek.tgid));
    const link = this.object.attach('find_postmaster');
    try {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        await wake().catch(() => undefined);
        const tgid = Number(this.globals.readBss('found_tgid'));
        if (tgid) return { tgid, level: Number(this.globals.readBss('found_level')) };
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      return null;
    } finally {
      link.destroy();
      this.globals.writeBss('seek_tgid', 0n);
    }
  }

  /** Marks exited every tracked process that is gone without BPF seeing its last switch (orphans after a crash). */
  markExitedGone(): void {
    markExitedWhilePaused(this.object, this.options.target.procShowsPgPids);
  }

  /**
   * Deletes exclusions (and their records) of pids that no longer exist: a connection that ended
   * before it was excluded, or whose last switch ran while nothing was attached. Returns how many
   * live exclusions remain. A few /proc lookups: the set holds the collector's live connections.
   * The set is keyed by the pid Postgres knows: where /proc shows other pids (Postgres in a
   * container, the collector on the host), a backend is looked up by its record's kernel pid.
   */
  forgetGoneExclusions(): number {
    const { keys, count } = this.object.mapLookupBatch('excluded_pids');
    if (!count) return 0;
    const target = this.options.target;
    let kernelPids: Map<number, number[]> | null = null;
    if (!target.procShowsPgPids) {
      kernelPids = new Map();
      const batch = this.object.mapLookupBatch('backends');
      for (let i = 0; i < batch.count; i++) {
        const pgPid = this.backendLayout.intNumber(batch.values, i * batch.valueSize, 'pg_pid');
        kernelPids.set(pgPid, [...(kernelPids.get(pgPid) ?? []), batch.keys.readUInt32LE(i * batch.keySize)]);
      }
    }
    let live = 0;
    for (let i = 0; i < count; i++) {
      const pid = keys.readUInt32LE(i * 4);
      const alive = kernelPids
        ? (kernelPids.get(pid) ?? procPidsFor(pid).filter((p) => inPidNamespace(p, target.pidns))).some((p) => existsSync(`/proc/${p}`))
        : existsSync(`/proc/${pid}`);
      if (alive) {
        live++;
        continue;
      }
      this.object.mapDelete('excluded_pids', pidKey(pid));
      this.deleteRecordsOf(pid);
    }
    return live;
  }

  /** Forgets processes whose final figures were written, each from the map its record was read in. */
  deleteBackends(records: readonly BackendRecordRef[]): void {
    for (const map of ['exited_backends', 'backends'] as const) {
      const refs = records.filter((r) => r.retired === (map === 'exited_backends'));
      if (!refs.length) continue;
      // exited_backends: struct exited_key (pid, padding, task_start_ns); backends: the pid.
      const keySize = map === 'exited_backends' ? Structs.exited_key.size : 4;
      const keys = Buffer.alloc(refs.length * keySize);
      refs.forEach((r, i) => {
        keys.writeUInt32LE(r.key, i * keySize + Structs.exited_key.fields.pid.offset);
        if (map === 'exited_backends') keys.writeBigUInt64LE(r.taskStartNs, i * keySize + Structs.exited_key.fields.task_start_ns.offset);
      });
      this.object.mapDeleteBatch(map, keys, refs.length);
    }
  }

  /** Detaches every probe set and frees the object; safe to call twice. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const name of this.probes.attached()) this.probes.detach(name);
    this.programs.close();
    this.object.close();
  }
}

function pidKey(pid: number): Buffer {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(pid);
  return key;
}

/** Nanoseconds per jiffy, or 0 when the tick rate is unknown (the io set is then unsupported). */
function jiffyNs(): number {
  const hz = KernelFeatures.host().hz();
  return hz ? Math.round(1e9 / hz) : 0;
}

/** Whether /proc/<pid> is a process of the pid namespace `ns`. */
function inPidNamespace(pid: number, ns: NamespaceId): boolean {
  try {
    const id = namespaceOf(pid, 'pid');
    return id.ino === ns.ino && id.dev === ns.dev;
  } catch {
    return false;
  }
}
