import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { ProgramName, RodataName } from '../bpf/contract.js';
import { UserError } from '../errors.js';
import { loadNative } from '../native/bpf-native.js';
import { packageRoot } from '../package-root.js';
import type { PostmasterTarget, StatusLayout } from '../target/postmaster-target.js';
import { disableMissingTracepoints } from './disable-missing-tracepoints.js';
import { KernelFeatures } from './kernel-features.js';
import { MapReaders } from './map-readers.js';
import { ObjectGlobals } from './object-globals.js';
import type { PerfEventSpec } from './perf-events.js';
import type { AttachableSet } from './probe-attachment.js';
import { ProbeAttachments } from './probe-attachments.js';
import { statusSpan } from './status-span.js';

export interface CollectorObjectOptions<Name extends string> {
  target: PostmasterTarget;
  layout: StatusLayout;
  /** Every probe set the object can attach, by name (src/families/). */
  probeSets: Readonly<Record<Name, AttachableSet<Name>>>;
  /** Settings the families add to the object's own (e.g. the lock programs' per-version ones). */
  rodata?: Partial<Record<RodataName, number | bigint>>;
  /** Map capacities: backends tracked at once, distinct query keys. */
  maxBackends?: number;
  maxQueries?: number;
  /** Query keys one role may hold (default half of maxQueries; 0: no limit). */
  maxQueryKeysPerRole?: number;
  /** Capacity of excluded_pids, the collector's own live connections (default 256; tests shrink it). */
  maxExcludedPids?: number;
  /**
   * Replaces the perf event a perf-event program is attached to (by program name): for hosts
   * whose PMU names its LLC events differently, and for tests that prove the path with a
   * software event on a host without a PMU.
   */
  perfEvents?: Partial<Record<ProgramName, PerfEventSpec>>;
}

/** Path of the compiled collector object. */
export function collectorObjectPath(): string {
  return join(packageRoot(), 'build', 'bpf', 'pgstats.bpf.o');
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

  private constructor(
    private readonly object: CollectorBpfObject,
    globals: ObjectGlobals,
    options: CollectorObjectOptions<Name>,
  ) {
    this.maps = new MapReaders(object, loadNative().numPossibleCpus());
    this.probes = new ProbeAttachments(object, globals, this.maps, options.target, options.probeSets, options.perfEvents ?? {});
  }

  static load<Name extends string>(options: CollectorObjectOptions<Name>): CollectorObject<Name> {
    const path = collectorObjectPath();
    if (!existsSync(path)) throw new UserError(`${path} is missing: run npm run build`);
    const object: CollectorBpfObject = new (loadNative().BpfObject)(path);
    try {
      const { target, layout } = options;
      const span = statusSpan(layout);
      const globals = new ObjectGlobals(object);
      globals.writeRodata({
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
        ...options.rodata,
        jiffy_ns: jiffyNs(),
        status_activity_start_off: layout.activityStartOffset ?? 0,
        status_state_off: layout.stateOffset ?? 0,
        status_state_idle: layout.stateIdle,
        status_span_off: span.offset,
        status_span_len: span.length,
        status_xact_start_before: layout.xactStartBeforeActivity ? 1 : 0,
        // One role may hold half of the queries map: the other half stays for everyone else.
        max_query_keys_per_role: options.maxQueryKeysPerRole ?? Math.floor((options.maxQueries ?? 8192) / 2),
      });
      disableMissingTracepoints(object, KernelFeatures.host());
      object.setMaxEntries('backends', options.maxBackends ?? 8192);
      object.setMaxEntries('queries', options.maxQueries ?? 8192);
      object.setMaxEntries('excluded_pids', options.maxExcludedPids ?? 256);
      object.load();
      globals.writeBss('tracking_since_ns', process.hrtime.bigint());
      return new CollectorObject(object, globals, options);
    } catch (error) {
      object.close();
      throw error;
    }
  }

  /**
   * Leaves one of the collector's own backends out of every figure, for as long as it lives: its
   * entry goes at its final context switch (bpf/cpu.bpf.h), or at the next forgetGoneExclusions()
   * when it died before that could happen. Throws when the set is full of live connections.
   */
  exclude(pid: number): void {
    const key = pidKey(pid);
    try {
      this.object.mapUpdate('excluded_pids', key, Buffer.from([1]));
    } catch {
      // Full: entries of pids that are gone may still be there (died before their exclusion).
      this.forgetGoneExclusions();
      this.object.mapUpdate('excluded_pids', key, Buffer.from([1]));
    }
    // A record made before the exclusion is dropped; the next switch re-creates it excluded.
    this.object.mapDelete('backends', key);
  }

  /**
   * Deletes exclusions (and their records) of pids that no longer exist: a connection that ended
   * before it was excluded, or whose last switch ran while nothing was attached. Returns how many
   * live exclusions remain. A few /proc lookups: the set holds the collector's live connections.
   */
  forgetGoneExclusions(): number {
    const { keys, count } = this.object.mapLookupBatch('excluded_pids');
    let live = 0;
    for (let i = 0; i < count; i++) {
      const pid = keys.readUInt32LE(i * 4);
      if (existsSync(`/proc/${pid}`)) {
        live++;
        continue;
      }
      const key = pidKey(pid);
      this.object.mapDelete('excluded_pids', key);
      this.object.mapDelete('backends', key);
    }
    return live;
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
    for (const name of this.probes.attached()) this.probes.detach(name);
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
