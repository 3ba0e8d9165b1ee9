import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../errors.js';
import { RecordLayout } from '../bpf/record-layout.js';
import { loadNative, type BpfLink as NativeBpfLink, type BpfObject as NativeBpfObject, type MapBatch } from '../native/bpf-native.js';
import { packageRoot } from '../package-root.js';
import type { ProbeSetName } from '../collect/metric-columns.js';
import type { PostmasterTarget, StatusLayout } from '../target/postmaster-target.js';
import { disableMissingTracepoints } from './disable-missing-tracepoints.js';
import { KernelFeatures } from './kernel-features.js';
import { PROBE_SETS, type ProbeAttachment } from './probe-sets.js';
import { attachTargetProbes, lockRodata } from './attach-target-probes.js';
import { statusSpan } from './status-span.js';
import { onlineCpus, perfEventsUnsupportedReason, type PerfEventSpec } from './perf-events.js';
import { SwitchLink } from './switch-link.js';
import { decodeHistograms, type HistogramSample } from '../collect/decode-histograms.js';
import { CLOCK_TICKS, procStat } from '../target/proc-stat.js';

export interface CollectorObjectOptions {
  target: PostmasterTarget;
  layout: StatusLayout;
  /** Map capacities: backends tracked at once, distinct query keys. */
  maxBackends?: number;
  maxQueries?: number;
  /**
   * Replaces the perf event a perf-event program is attached to (by program name): for hosts
   * whose PMU names its LLC events differently, and for tests that prove the path with a
   * software event on a host without a PMU.
   */
  perfEvents?: Partial<Record<string, PerfEventSpec>>;
}

/** Raw cumulative sample of one tracked process (bpf/pgstats.h, struct backend_record). */
export interface BackendSample {
  pid: number;
  metrics: bigint[];
  queryid: bigint;
  backendStartUs: bigint;
  taskStartNs: bigint;
  exitedNs: bigint;
  userid: number;
  dbid: number;
  backendType: number;
  identityKnown: boolean;
}

/** Raw cumulative sample of one query key, summed over CPUs. */
export interface QuerySample {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
  metrics: bigint[];
}

/** Entries in one bounded map against its capacity (bpf_stats.health.map_fill). */
export interface MapFill {
  map: string;
  entries: number;
  maxEntries: number;
}

/** The maps whose capacity bounds what the collector can track. */
const FILL_MAPS = ['backends', 'queries', 'histograms'];
const FILL_MAX_AGE_MS = 10_000;

export const COUNTER_NAMES = [
  'backends_full',
  'queries_full',
  'status_unreadable',
  'histograms_full',
  'mem_stalls_full',
  'io_inflight_full',
  'memio_untracked',
  'io_completions_missed',
  'lock_waits_full',
  'lwlock_waits_full',
] as const;

const BACKEND_IDENTITY_KNOWN = 0x1n;
const BACKEND_EXCLUDED = 0x2n;

/** Path of the compiled collector object. */
export function collectorObjectPath(): string {
  return join(packageRoot(), 'build', 'bpf', 'pgstats.bpf.o');
}

/**
 * The loaded collector BPF object (bpf/pgstats.bpf.c): configured for one postmaster,
 * with probe sets attached and detached by name, and its maps read as typed samples.
 *
 * @example
 * const obj = CollectorObject.load({ target, layout });
 * obj.attach('cpu');
 * const queries = obj.readQueries(['on_cpu_ns', 'runq_ns']); // summed over CPUs
 * obj.close();
 */
export class CollectorObject {
  private readonly links = new Map<ProbeSetName, NativeBpfLink[]>();
  private readonly backendLayout: RecordLayout;
  private readonly queryKeyLayout: RecordLayout;
  private readonly queryValueLayout: RecordLayout;
  private readonly cpus: number;
  private closed = false;
  /** Entries of each bounded map at its last full read (for mapFill). */
  private readonly entries = new Map<string, number>();
  private readonly entriesAt = new Map<string, number>();

  private constructor(
    private readonly object: NativeBpfObject,
    private readonly target: PostmasterTarget,
    private readonly layout: StatusLayout,
    private readonly perfEvents: Partial<Record<string, PerfEventSpec>> = {},
  ) {
    const native = loadNative();
    this.cpus = native.numPossibleCpus();
    this.backendLayout = new RecordLayout(object.mapLayout('backends').value, 'struct backend_record');
    const queries = object.mapLayout('queries');
    this.queryKeyLayout = new RecordLayout(queries.key, 'struct query_key');
    this.queryValueLayout = new RecordLayout(queries.value, 'struct metrics');
  }

  static load(options: CollectorObjectOptions): CollectorObject {
    const path = collectorObjectPath();
    if (!existsSync(path)) throw new UserError(`${path} is missing: run npm run build`);
    const native = loadNative();
    const object = new native.BpfObject(path);
    try {
      const { target, layout } = options;
      const span = statusSpan(layout);
      writeRodata(object, {
        postmaster_tgid: target.pid,
        my_be_entry_addr: target.addresses.myBEEntry,
        my_wait_event_info_addr: target.addresses.myWaitEventInfo,
        status_procpid_off: layout.procpidOffset,
        status_backend_type_off: layout.backendTypeOffset,
        status_proc_start_off: layout.procStartOffset,
        status_dbid_off: layout.dbidOffset,
        status_userid_off: layout.useridOffset,
        status_query_id_off: layout.queryIdOffset ?? 0,
        client_read_event: layout.clientReadEvent,
        client_backend_type: layout.clientBackendType,
        ...lockRodata(target),
        jiffy_ns: jiffyNs(),
        status_activity_start_off: layout.activityStartOffset ?? 0,
        status_state_off: layout.stateOffset ?? 0,
        status_state_idle: layout.stateIdle,
        status_span_off: span.offset,
        status_span_len: span.length,
        status_xact_start_before: layout.xactStartBeforeActivity ? 1 : 0,
      });
      disableMissingTracepoints(object, KernelFeatures.host());
      object.setMaxEntries('backends', options.maxBackends ?? 8192);
      object.setMaxEntries('queries', options.maxQueries ?? 8192);
      object.load();
      const loaded = new CollectorObject(object, target, layout, options.perfEvents);
      loaded.writeBss('tracking_since_ns', process.hrtime.bigint());
      return loaded;
    } catch (error) {
      object.close();
      throw error;
    }
  }

  attached(): ProbeSetName[] {
    return [...this.links.keys()];
  }

  /** Attaches a probe set; attaching one that is attached already does nothing. */
  attach(name: ProbeSetName): void {
    if (this.links.has(name)) return;
    const set = PROBE_SETS[name];
    const reason = this.unsupportedReason(name);
    if (reason) throw new UserError(`probe set ${name} is not supported here: ${reason}`);
    const links: NativeBpfLink[] = [];
    try {
      for (const a of set.attachments) links.push(...this.attachOne(a));
    } catch (error) {
      for (const link of links) link.destroy();
      throw error;
    }
    this.links.set(name, links);
  }

  /** Why a set cannot be attached with this object's configuration, or null. */
  unsupportedReason(name: ProbeSetName): string | null {
    const set = PROBE_SETS[name];
    const perf = set.attachments.filter((a) => a.kind === 'perf-event');
    if (perf.length && perf.every((a) => this.perfEvents[a.program])) {
      return perfEventsUnsupportedReason(perf.map((a) => this.perfEvents[a.program]!));
    }
    if (name === 'latency' && this.layout.activityStartOffset === null) {
      return 'query_start/state_change not found side by side in PgBackendStatus (track_activities off?)';
    }
    return set.unsupportedReason(this.target);
  }

  private attachOne(a: ProbeAttachment): NativeBpfLink[] {
    switch (a.kind) {
      case 'auto':
        return [this.object.attach(a.program)];
      case 'statement-end':
        return [this.attachStatementEnd(a.program)];
      case 'target':
        return attachTargetProbes(this.object, this.target, a.probes(this.target));
      case 'switch':
        return [new SwitchLink(() => this.setHistSwitch(a.bit, true), () => this.setHistSwitch(a.bit, false))];
      case 'perf-event': {
        const event = this.perfEvents[a.program] ?? a.event;
        const links: NativeBpfLink[] = [];
        try {
          for (const cpu of onlineCpus()) {
            links.push(this.object.attachPerfEvent(a.program, { type: event.type, config: event.config, samplePeriod: event.samplePeriod, cpu }));
          }
        } catch (error) {
          for (const link of links) link.destroy();
          throw error;
        }
        return links;
      }
    }
  }

  /** Flips one bit of the object's `hist_switches` (.bss), read by the sched_switch program. */
  private setHistSwitch(bit: number, on: boolean): void {
    const current = this.readBss('hist_switches');
    this.writeBss('hist_switches', on ? current | BigInt(bit) : current & ~BigInt(bit));
  }

  /** A global the BPF programs may change at run time (.bss), by name. */
  private readBss(name: string): bigint {
    const { variable, value } = this.bssVariable(name);
    return variable.size === 8 ? value.readBigUInt64LE(variable.offset) : BigInt(value.readUInt32LE(variable.offset));
  }

  private writeBss(name: string, to: bigint): void {
    const { variable, value } = this.bssVariable(name);
    if (variable.size === 8) value.writeBigUInt64LE(BigInt.asUintN(64, to), variable.offset);
    else value.writeUInt32LE(Number(BigInt.asUintN(32, to)), variable.offset);
    this.object.mapUpdate('.bss', Buffer.alloc(4), value);
  }

  private bssVariable(name: string) {
    const variable = this.object.mapLayout('.bss').value.find((f) => f.name === name);
    if (!variable) throw new Error(`BPF object has no ${name}: rebuild with npm run build`);
    const value = this.object.mapLookup('.bss', Buffer.alloc(4));
    if (!value) throw new Error('BPF object has no .bss value');
    return { variable, value };
  }

  /**
   * Detaches every probe set and returns their names, for resume(). The maps keep what was
   * collected; nothing is counted until resume().
   */
  pause(): ProbeSetName[] {
    const sets = this.attached();
    for (const name of sets) this.detach(name);
    return sets;
  }

  /**
   * Collection starts again after pause(), as if newly attached: a new tracking epoch makes each
   * kept record count from its task's next switch, tasks forked meanwhile count from that switch
   * too, waits whose start or end fell in the pause are forgotten, and processes that exited
   * meanwhile (their last switch unseen) are marked exited now, so the next flush closes them.
   */
  resume(sets: ProbeSetName[]): void {
    if (this.attached().length) throw new Error('resume() while probe sets are attached: pause() first');
    this.writeBss('tracking_since_ns', process.hrtime.bigint());
    this.writeBss('tracking_epoch', this.readBss('tracking_epoch') + 1n);
    for (const name of IN_FLIGHT_MAPS) this.clearMap(name);
    // One set that cannot attach again must not keep the others off.
    const failures: unknown[] = [];
    for (const name of sets) {
      try {
        this.attach(name);
      } catch (error) {
        failures.push(error);
      }
    }
    // After attaching: a process that exits from here on has its final switch seen by BPF, and
    // one that exited before (or is a zombie, its final switch done) is found here.
    this.markExitedWhilePaused();
    if (failures.length) throw failures[0];
  }

  private clearMap(name: string): void {
    if (!this.object.maps().some((m) => m.name === name)) return;
    const { keys, count } = this.object.mapLookupBatch(name);
    if (count) this.object.mapDeleteBatch(name, keys, count);
  }

  private markExitedWhilePaused(): void {
    const batch = this.object.mapLookupBatch('backends');
    const layout = this.backendLayout;
    const exited = layout.field('exited_ns');
    const now = process.hrtime.bigint();
    const offset = bootMinusMonotonicNs();
    for (let i = 0; i < batch.count; i++) {
      const at = i * batch.valueSize;
      if (layout.int(batch.values, at, 'exited_ns') !== 0n) continue;
      const pid = batch.keys.readUInt32LE(i * batch.keySize);
      if (sameProcess(pid, layout.int(batch.values, at, 'task_start_ns'), offset)) continue;
      const value = Buffer.from(batch.values.subarray(at, at + batch.valueSize));
      value.writeBigUInt64LE(now, exited.offset);
      this.object.mapUpdate('backends', batch.keys.subarray(i * batch.keySize, (i + 1) * batch.keySize), value);
    }
  }

  private attachStatementEnd(program: string): NativeBpfLink {
    const end = this.target.statementEnd!;
    // pid -1: every backend, including those forked after attach.
    return end.kind === 'usdt-site'
      ? this.object.attachUprobe(program, false, -1, this.target.binaryPath, null, Number(end.fileOffset))
      : this.object.attachUprobe(program, true, -1, this.target.binaryPath, end.symbol, 0);
  }

  detach(name: ProbeSetName): void {
    for (const link of this.links.get(name) ?? []) link.destroy();
    this.links.delete(name);
  }

  /** Leaves the collector's own backends out of every figure. */
  exclude(pid: number): void {
    const key = Buffer.alloc(4);
    key.writeUInt32LE(pid);
    this.object.mapUpdate('excluded_pids', key, Buffer.from([1]));
    // A record made before the exclusion is dropped; the next switch re-creates it excluded.
    this.object.mapDelete('backends', key);
  }

  readBackends(metricFields: string[]): BackendSample[] {
    const batch = this.object.mapLookupBatch('backends');
    this.entries.set('backends', batch.count);
    this.entriesAt.set('backends', Date.now());
    const layout = this.backendLayout;
    const names = metricFields.map((f) => `m.${f}`);
    const samples: BackendSample[] = [];
    for (let i = 0; i < batch.count; i++) {
      const at = i * batch.valueSize;
      const flags = layout.int(batch.values, at, 'flags');
      if (flags & BACKEND_EXCLUDED) continue;
      samples.push({
        pid: batch.keys.readUInt32LE(i * batch.keySize),
        metrics: names.map((n) => layout.int(batch.values, at, n)),
        queryid: layout.int(batch.values, at, 'queryid'),
        backendStartUs: layout.int(batch.values, at, 'backend_start_us'),
        taskStartNs: layout.int(batch.values, at, 'task_start_ns'),
        exitedNs: layout.int(batch.values, at, 'exited_ns'),
        userid: Number(layout.int(batch.values, at, 'userid')),
        dbid: Number(layout.int(batch.values, at, 'dbid')),
        backendType: Number(layout.int(batch.values, at, 'backend_type')),
        identityKnown: (flags & BACKEND_IDENTITY_KNOWN) !== 0n,
      });
    }
    return samples;
  }

  readQueries(metricFields: string[]): QuerySample[] {
    const batch = this.object.mapLookupBatch('queries');
    this.entries.set('queries', batch.count);
    this.entriesAt.set('queries', Date.now());
    const keys = this.queryKeyLayout;
    const stride = batch.valueSize / this.cpus;
    const samples: QuerySample[] = [];
    for (let i = 0; i < batch.count; i++) {
      const k = i * batch.keySize;
      samples.push({
        queryid: keys.int(batch.keys, k, 'queryid'),
        userid: Number(keys.int(batch.keys, k, 'userid')),
        dbid: Number(keys.int(batch.keys, k, 'dbid')),
        toplevel: keys.int(batch.keys, k, 'toplevel') !== 0n,
        metrics: this.queryValueLayout.sumPerCpu(batch.values, i * batch.valueSize, stride, this.cpus, metricFields),
      });
    }
    return samples;
  }

  /** Every entry of a map with its BTF key/value layout (for the families' own readers). */
  readMap(name: string): { batch: MapBatch; key: RecordLayout; value: RecordLayout } {
    const layout = this.object.mapLayout(name);
    return { batch: this.object.mapLookupBatch(name), key: new RecordLayout(layout.key, `${name} key`), value: new RecordLayout(layout.value, `${name} value`) };
  }

  /** The per-query histograms (bpf/pgstats.h, struct hist), summed over CPUs. */
  readHistograms(): HistogramSample[] {
    return decodeHistograms(this.object.mapLookupBatch('histograms'), this.object.mapLayout('histograms'), this.cpus);
  }

  /** Overflow and failure counters of the BPF side (bpf/pgstats.h, enum counter_index). */
  readCounters(): Record<(typeof COUNTER_NAMES)[number], bigint> {
    const out = {} as Record<(typeof COUNTER_NAMES)[number], bigint>;
    COUNTER_NAMES.forEach((name, index) => {
      const key = Buffer.alloc(4);
      key.writeUInt32LE(index);
      out[name] = this.object.mapLookup('counters', key)?.readBigUInt64LE(0) ?? 0n;
    });
    return out;
  }

  /**
   * How full the bounded maps are: entries and capacity as of each map's last read (every
   * flush reads backends and queries). A map nothing read for FILL_MAX_AGE_MS is counted with
   * a batch read of its own, no more often than that: a full histograms map takes ~20 ms.
   */
  mapFill(): MapFill[] {
    const capacity = new Map(this.object.maps().map((m) => [m.name, m.maxEntries]));
    return FILL_MAPS.filter((name) => capacity.has(name)).map((name) => {
      const known = this.entries.get(name);
      if (known === undefined || (this.entriesAt.get(name) ?? 0) < Date.now() - FILL_MAX_AGE_MS) {
        this.entries.set(name, this.object.mapLookupBatch(name).count);
        this.entriesAt.set(name, Date.now());
      }
      return { map: name, entries: this.entries.get(name)!, maxEntries: capacity.get(name)! };
    });
  }

  /** Forgets processes whose final figures were written. */
  deleteBackends(pids: number[]): void {
    if (!pids.length) return;
    const keys = Buffer.alloc(pids.length * 4);
    pids.forEach((pid, i) => keys.writeUInt32LE(pid, i * 4));
    this.object.mapDeleteBatch('backends', keys, pids.length);
  }

  /** Detaches every probe set and frees the object; safe to call twice. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const name of [...this.links.keys()]) this.detach(name);
    this.object.close();
  }
}

/** Start-of-wait maps: an entry whose end fell in a pause would charge the pause. */
const IN_FLIGHT_MAPS = ['mem_stalls', 'io_inflight', 'lock_wait_starts', 'lwlock_wait_starts'];

/**
 * Whether `pid` is still the live process that started at `taskStartNs` (task->start_time,
 * CLOCK_MONOTONIC): /proc/<pid>/stat counts its start in clock ticks since boot, so the two
 * agree to a tick or two once the time the machine was suspended is added. A zombie has made
 * its final context switch already, so it counts as gone.
 */
function sameProcess(pid: number, taskStartNs: bigint, bootMinusMonotonicNs: bigint): boolean {
  const stat = procStat(pid);
  if (!stat || stat.state === 'Z' || stat.state === 'X') return false;
  const tickNs = BigInt(1e9 / CLOCK_TICKS);
  const difference = BigInt(stat.startTicks) * tickNs - (taskStartNs + bootMinusMonotonicNs);
  return difference > -3n * tickNs && difference < 3n * tickNs;
}

/** CLOCK_BOOTTIME - CLOCK_MONOTONIC (time suspended), to 10 ms: /proc/uptime is boot-based. */
function bootMinusMonotonicNs(): bigint {
  const uptimeNs = BigInt(Math.round(Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * 1e3)) * 1_000_000n;
  return uptimeNs - process.hrtime.bigint();
}

/** Writes `const volatile` settings by name; a name the object lacks is a build mismatch. */
function writeRodata(object: NativeBpfObject, values: Record<string, number | bigint>): void {
  const variables = new Map(object.rodata().map((v) => [v.name, v]));
  for (const [name, value] of Object.entries(values)) {
    const v = variables.get(name);
    if (!v) throw new Error(`BPF object has no setting ${name}: rebuild with npm run build`);
    const bytes = Buffer.alloc(v.size);
    if (v.size === 8) bytes.writeBigUInt64LE(BigInt.asUintN(64, BigInt(value)));
    else if (v.size === 4) bytes.writeUInt32LE(Number(BigInt.asUintN(32, BigInt(value))));
    else throw new Error(`BPF setting ${name} has unsupported size ${v.size}`);
    object.setRodata(v.offset, bytes);
  }
}

/** Nanoseconds per jiffy, or 0 when the tick rate is unknown (the io set is then unsupported). */
function jiffyNs(): number {
  const hz = KernelFeatures.host().hz();
  return hz ? Math.round(1e9 / hz) : 0;
}
