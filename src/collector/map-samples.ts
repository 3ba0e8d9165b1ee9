import type { FieldOf, Maps, MapName, StructName } from '../bpf/contract.js';
import type { RecordLayout } from '../bpf/record-layout.js';
import type { MapBatch } from '../native/bpf-native.js';
import type { ExactInt } from '../exact-int.js';

/** Where a process's record is: its pid and start (exited_backends' key is both), and whether it is in exited_backends rather than backends. */
export interface BackendRecordRef {
  key: number;
  taskStartNs: bigint;
  retired: boolean;
}

/** Raw cumulative sample of one tracked process (bpf/records.h, struct backend_record). */
export interface BackendSample {
  /** The pid Postgres knows it by (pg_stat_activity.pid): in a container, its pid in the postmaster's pid namespace. */
  pid: number;
  /** Its key in the backends map: the pid the kernel (and BPF) knows it by, in the initial pid namespace. */
  key: number;
  /** Read from exited_backends, where BPF moves a record when its process exits (bpf/attribution.bpf.h). */
  retired: boolean;
  /** Cumulative, in the order of the metric fields read. */
  metrics: ExactInt[];
  queryid: bigint;
  backendStartUs: bigint;
  taskStartNs: bigint;
  exitedNs: bigint;
  userid: number;
  dbid: number;
  backendType: number;
  identityKnown: boolean;
  /** Its memory cgroup's id (bpf/attribution.bpf.h memory_cgroup_of), 0 when unread. */
  memoryCgroup: bigint;
  /** Its sleeps waiting for the client (ClientRead), cumulative: count and nanoseconds (bpf/wait-events.bpf.h). */
  clientWaits: bigint;
  clientWaitNs: bigint;
  /** The remainder of its runnable intervals (interrupt time), in other_wait with no wait event, nanoseconds. */
  unclassedNs: bigint;
  /** Its wait events counted in the record (wait_slot_*), cumulative; the used slots only. */
  waitSlots: WaitSlot[];
}

/** One wait event counted in a process's record or a query's entry rather than in a wait-event map (bpf/wait-events.bpf.h). */
export interface WaitSlot {
  waitEventInfo: number;
  waits: bigint;
  waitNs: bigint;
  runqNs: bigint;
}

/** Raw cumulative sample of one query key, summed over CPUs. */
export interface QuerySample {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
  /** userid/dbid/toplevel/queryid as one string (queryIdentityKey), made once per decode; absent: made when needed. */
  id?: string;
  /** Cumulative; shared with later snapshots while the entry's bytes stay the same: never changed in place. */
  metrics: ExactInt[];
  /** Its wait events counted in its entry (wait_slot_* of struct query_value), cumulative, summed over CPUs by event. */
  waitSlots: WaitSlot[];
  /** The key as the map holds it (a view into the snapshot's batch), for evicting it. */
  rawKey: Buffer;
}

/** The wait slots of a query key's entry as the collector evicted it (MapReaders.evictQueries): owed to query_wait_event_stats. */
export type EvictedWaitSlots = Pick<QuerySample, 'userid' | 'dbid' | 'toplevel' | 'queryid' | 'waitSlots'>;

/**
 * A statement's key as one string: the same for a map entry, its evicted remainder and its row.
 * The query id is as the caller holds it (unsigned from the map, signed text in rows): one map of
 * keys uses one form.
 */
export function queryIdentityKey(s: { userid: number; dbid: number; toplevel: boolean; queryid: bigint | string }): string {
  return `${s.userid}/${s.dbid}/${s.toplevel ? 1 : 0}/${s.queryid}`;
}

/** What the programs noted since load (struct activity, bpf/activity.bpf.h), summed over CPUs; both only grow. */
export interface Activity {
  /** Entries added or removed, figures of queries, histograms or lock waits updated, overflows counted. */
  changes: bigint;
  /** Time added to the backend records' busy figures (the ones MetricRows' busy rule sums). */
  busyNs: bigint;
}

/** Entries in one bounded map against its capacity (bpf_stats.health.map_fill). */
export interface MapFill {
  map: string;
  entries: number;
  maxEntries: number;
  /** Entries the collector evicted since load (queries: written and quiet, see MetricRows). */
  evicted?: number;
  /** Times it was full since load (query_changes: a changed key could not be noted, so that read was whole). */
  overflowed?: number;
  /** Events of keys it refused at once whose figures were held in a backend's overflow slot and written by a flush (queries), since load. */
  held?: number;
}

/** What an overflow slot held (bpf/attribution.bpf.h, query_overflow): a refused key's figures, taken by a flush. */
export interface QueryOverflowSample {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
  metrics: ExactInt[];
}

/** The fields of a map's key or value when it is a struct of bpf/ (never for a plain integer). */
type PartFields<N extends MapName, Part extends 'key' | 'value'> = (typeof Maps)[N] extends { [P in Part]: infer T }
  ? T extends StructName
    ? FieldOf<T>
    : never
  : never;

/** A batch read of one map with its BTF key/value layouts, for the families' own decoders. */
export interface RawMap<N extends MapName = MapName> {
  batch: MapBatch;
  key: RecordLayout<PartFields<N, 'key'>>;
  value: RecordLayout<PartFields<N, 'value'>>;
}
