import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import { BackendFlags, Maps, Structs, type FieldOf, type MapName, type StructName } from '../bpf/contract.js';
import { COUNTERS, type CounterName } from '../bpf/counters.js';
import { RecordLayout, type BtfField } from '../bpf/record-layout.js';
import type { MapBatch } from '../native/bpf-native.js';
import type { ExactInt } from '../exact-int.js';
import { histogramDecoder, type HistogramSample } from './decode-histograms.js';
import { KeyedEntries } from './keyed-entries.js';
import { ChangedKeyReads, HISTOGRAM_CHANGES, QUERY_CHANGES } from './changed-key-reads.js';
import type { ObjectGlobals } from './object-globals.js';
import {
  queryIdentityKey,
  type Activity,
  type BackendSample,
  type EvictedWaitSlots,
  type MapFill,
  type QueryOverflowSample,
  type QuerySample,
  type RawMap,
  type WaitSlot,
} from './map-samples.js';
import { MapSnapshot } from './map-snapshot.js';

/** The wait slot arrays of struct backend_record and struct query_value (WAIT_SLOTS), in the order decodeWaitSlots takes them. */
const WAIT_SLOT_FIELDS = ['wait_slot_waits', 'wait_slot_ns', 'wait_slot_runq_ns', 'wait_slot_event'] as const;

/** The maps whose capacity bounds what the collector can track (bpf_stats.health.map_fill). */
const FILL_MAPS: readonly MapName[] = ['backends', 'exited_backends', 'queries', 'histograms', 'query_changes', 'hist_changes'];

/**
 * Reads the collector object's maps as typed samples, with field offsets from its BTF.
 * A flush reads through snapshot(), once.
 *
 * @example
 * const snapshot = object.maps.snapshot(['on_cpu_ns', 'runq_ns']);
 */
export class MapReaders {
  private readonly backendLayout: RecordLayout<FieldOf<'backend_record'>>;
  /** Where WAIT_SLOT_FIELDS are in a record. */
  private readonly waitSlotFields: BtfField[];
  private readonly queryKeyLayout: RecordLayout<FieldOf<'query_key'>>;
  private readonly queryValueLayout: RecordLayout<FieldOf<'query_value'>>;
  /** Where WAIT_SLOT_FIELDS are in a queries entry. */
  private readonly queryWaitSlotFields: BtfField[];
  /** The metric fields last asked for, as struct query_value names them (one array, so sumPerCpu keeps its field list). */
  private queryMetricNames: { of: readonly FieldOf<'metrics'>[]; names: FieldOf<'query_value'>[] } | null = null;
  /** Wait slots of the query keys evicted since, until a snapshot that carries them is prepared (see snapshot()). */
  private evictedWaitSlots: EvictedWaitSlots[] = [];
  /** Query keys evicted per role (userid) since load, as role_evicted holds them. */
  private readonly evictedByRole = new Map<number, bigint>();
  /** Query keys evicted since load, as query_keys_evicted holds it (BPF's view of the map's fill). */
  private evictedKeys = 0n;
  private readonly overflowLayout: RecordLayout<FieldOf<'query_overflow'>>;
  /** Overflow slots taken whose figures no prepared snapshot has passed on yet (in the order taken). */
  private overflowTaken: QueryOverflowSample[] = [];
  /** The big maps' entries as last decoded: a flush decodes only what changed since. */
  private readonly queryEntries = new KeyedEntries<QuerySample>(withRawKey);
  /** The metric fields the entries above and below were decoded with (other fields: decoded again). */
  private decodedFields = '';
  private readonly queryReads: ChangedKeyReads;
  private readonly histogramEntries = new KeyedEntries<HistogramSample>(withRawKey);
  /** Backend records, read whole: an idle connection's record is compared, not decoded again. */
  private readonly liveBackends = new KeyedEntries<BackendSample>();
  private readonly exitedBackends = new KeyedEntries<BackendSample>();
  private readonly histogramReads: ChangedKeyReads;
  private readonly decodeHistogram: ReturnType<typeof histogramDecoder>;

  constructor(
    private readonly object: CollectorBpfObject,
    private readonly globals: ObjectGlobals,
    private readonly cpus: number,
  ) {
    this.overflowLayout = RecordLayout.of('query_overflow', object.mapLayout('query_overflow').value);
    this.queryReads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
    this.histogramReads = new ChangedKeyReads(object, globals, HISTOGRAM_CHANGES);
    this.backendLayout = RecordLayout.of('backend_record', object.mapLayout('backends').value);
    this.waitSlotFields = WAIT_SLOT_FIELDS.map((name) => this.backendLayout.field(name));
    const queries = object.mapLayout('queries');
    this.queryKeyLayout = RecordLayout.of('query_key', queries.key);
    this.queryValueLayout = RecordLayout.of('query_value', queries.value);
    this.queryWaitSlotFields = WAIT_SLOT_FIELDS.map((name) => this.queryValueLayout.field(name));
    this.decodeHistogram = histogramDecoder(object.mapLayout('histograms'), cpus);
  }

  /**
   * What the programs noted since load (bpf/activity.bpf.h), summed over CPUs: one small read,
   * so that a periodic flush with nothing to write can end before snapshot().
   */
  readActivity(): Activity {
    const value = this.object.mapLookup('activity', Buffer.alloc(4));
    const activity = { changes: 0n, busyNs: 0n };
    if (!value) return activity;
    const { changes, busy_ns } = Structs.activity.fields;
    const stride = value.length / this.cpus;
    for (let cpu = 0; cpu < this.cpus; cpu++) {
      activity.changes += value.readBigUInt64LE(cpu * stride + changes.offset);
      activity.busyNs += value.readBigUInt64LE(cpu * stride + busy_ns.offset);
    }
    return activity;
  }

  /** Reads the maps every flush needs; `metricFields`: the members of struct metrics to read, in column order. */
  snapshot(metricFields: readonly FieldOf<'metrics'>[]): MapSnapshot {
    // Exited records first: a process that exits between the two reads is then in neither (the
    // next flush has it) rather than in both, which would count it twice.
    const exited = this.object.mapLookupBatch('exited_backends');
    const backends = this.object.mapLookupBatch('backends');
    let counters: Record<CounterName, bigint> | null = null;
    const fields = metricFields.join();
    if (this.decodedFields !== fields) {
      this.decodedFields = fields;
      for (const entries of [this.queryEntries, this.liveBackends, this.exitedBackends]) entries.forgetDecoded();
    }
    const read = this.queryReads.read(() => (counters = this.readCounters()).query_changes_full, this.queryEntries.size);
    const queries = this.decodeQueries(read.batch, read.complete, metricFields);
    // After the queries map: a slot taken now holds figures that missed the map until now. Kept
    // here until a snapshot carrying them is prepared, so a flush that fails before that loses nothing.
    this.overflowTaken.push(...this.takeOverflow(metricFields));
    const overflow = [...this.overflowTaken];
    const evictedWaitSlots = [...this.evictedWaitSlots];
    // The counters again after this take: an overflow of hist_changes before it shows.
    const histogramRead = this.histogramReads.read(() => (counters = this.readCounters()).hist_changes_full, this.histogramEntries.size);
    const histograms = this.histogramEntries
      .update(histogramRead.batch, histogramRead.complete, this.decodeHistogram)
      .filter((sample) => sample !== null);
    const counts: Partial<Record<MapName, number>> = {
      backends: backends.count,
      exited_backends: exited.count,
      queries: this.queryEntries.size,
      histograms: this.histogramEntries.size,
      query_changes: read.taken,
      hist_changes: histogramRead.taken,
    };
    const capacity = new Map(this.object.maps().map((m) => [m.name, m.maxEntries]));
    const fill: MapFill[] = FILL_MAPS.filter((name) => capacity.has(name)).map((name) => ({
      map: name,
      entries: counts[name]!,
      maxEntries: capacity.get(name)!,
    }));
    // Not a loss: that read was whole. Shown with its map (map_fill), not among dropped events.
    const { query_changes_full: queriesOverflowed, hist_changes_full: histogramsOverflowed, query_key_held: held, ...dropped } = counters!;
    const overflowed = { query_changes: queriesOverflowed, hist_changes: histogramsOverflowed };
    for (const f of fill) if (f.map === 'query_changes' || f.map === 'hist_changes') f.overflowed = Number(overflowed[f.map]);
    // Not a loss either: those figures are written under their keys (MetricRows).
    for (const f of fill) if (f.map === 'queries') f.held = Number(held);
    return new MapSnapshot(
      [
        ...this.decodeBackends(this.exitedBackends, exited, metricFields, true),
        ...this.decodeBackends(this.liveBackends, backends, metricFields, false),
      ],
      queries,
      read.complete,
      histograms,
      dropped,
      fill,
      (name) => this.readMap(name),
      (all) => this.queryReads.written(all),
      histogramRead.complete,
      (all) => this.histogramReads.written(all),
      overflow,
      () => {
        // Passed on by this snapshot: what later reads took stays.
        if (!overflow.length) return;
        const passed = new Set(overflow);
        this.overflowTaken = this.overflowTaken.filter((s) => !passed.has(s));
      },
      evictedWaitSlots,
      () => {
        if (!evictedWaitSlots.length) return;
        const passed = new Set(evictedWaitSlots);
        this.evictedWaitSlots = this.evictedWaitSlots.filter((s) => !passed.has(s));
      },
    );
  }

  /**
   * Takes every overflow slot (bpf/attribution.bpf.h): one BPF_MAP_LOOKUP_AND_DELETE_ELEM each,
   * so what BPF adds after the take starts a new slot for the next flush. Usually none: a slot is
   * made only when the queries map refused a key.
   */
  private takeOverflow(metricFields: readonly FieldOf<'metrics'>[]): QueryOverflowSample[] {
    const { keys, count, keySize } = this.object.mapLookupBatch('query_overflow');
    const layout = this.overflowLayout;
    const names = metricFields.map((f) => `m.${f}` as const);
    const taken: QueryOverflowSample[] = [];
    for (let i = 0; i < count; i++) {
      const value = this.object.mapLookupAndDelete('query_overflow', keys.subarray(i * keySize, (i + 1) * keySize));
      if (!value) continue;
      const userid = layout.intNumber(value, 0, 'key.userid');
      const dbid = layout.intNumber(value, 0, 'key.dbid');
      // Taken between BPF's insert and its write of the key: no key, nothing worth a row.
      if (!userid && !dbid) continue;
      taken.push({
        queryid: layout.int(value, 0, 'key.queryid'),
        userid,
        dbid,
        toplevel: layout.intNumber(value, 0, 'key.toplevel') !== 0,
        metrics: layout.sumPerCpu(value, 0, 0, 1, names),
      });
    }
    return taken;
  }

  /** Every entry of a map with its BTF key/value layout. */
  readMap<N extends MapName>(name: N): RawMap<N> {
    const layout = this.object.mapLayout(name);
    const part = (type: string, fields: BtfField[]) =>
      type in Structs ? RecordLayout.of(type as StructName, fields) : new RecordLayout(fields, `${name} ${type}`);
    const { key, value } = Maps[name] as { key: string; value: string };
    return { batch: this.object.mapLookupBatch(name), key: part(key, layout.key), value: part(value, layout.value) } as RawMap<N>;
  }

  /**
   * Deletes histograms and returns what each held at the moment of its deletion (summed over
   * CPUs), null for one already gone: as evictQueries, one BPF_MAP_LOOKUP_AND_DELETE_ELEM each.
   */
  evictHistograms(rawKeys: readonly Buffer[]): Array<HistogramSample | null> {
    return this.lookupAndDelete('histograms', rawKeys).map((value, i) => {
      const key = rawKeys[i]!;
      this.histogramEntries.delete(key);
      return value ? this.decodeHistogram({ keys: key, values: value, count: 1, keySize: key.length, valueSize: value.length }, 0) : null;
    });
  }

  /** Deletes keys from a map (one BPF_MAP_LOOKUP_AND_DELETE_ELEM each), returning each value as it was deleted, null for a key already gone. */
  lookupAndDelete(map: MapName, rawKeys: readonly Buffer[]): Array<Buffer | null> {
    return rawKeys.map((key) => this.object.mapLookupAndDelete(map, key));
  }

  /** Overflow and failure counters of the BPF side (bpf/records.h, enum counter_index). */
  readCounters(): Record<CounterName, bigint> {
    // One batch read of the array (a flush reads it twice): a lookup per counter was ~40 syscalls.
    const { keys, values, count, keySize, valueSize } = this.object.mapLookupBatch('counters');
    const byIndex = new Map<number, bigint>();
    for (let i = 0; i < count; i++) byIndex.set(keys.readUInt32LE(i * keySize), values.readBigUInt64LE(i * valueSize));
    const out = {} as Record<CounterName, bigint>;
    for (const { name, index } of COUNTERS) out[name] = byIndex.get(index) ?? 0n;
    return out;
  }

  /**
   * Deletes query keys and returns what each held at the moment of its deletion (summed over
   * CPUs, `metricFields` in order), null for a key already gone. One BPF_MAP_LOOKUP_AND_DELETE_ELEM
   * per key: an increment a program made after the caller's last read is in the returned value.
   * What a key's wait slots held goes to the next snapshot (evictedWaitSlots), for the wait events' part.
   */
  evictQueries(rawKeys: readonly Buffer[], metricFields: readonly FieldOf<'metrics'>[]): Array<ExactInt[] | null> {
    const roles = new Set<number>();
    const values = rawKeys.map((key) => {
      const value = this.object.mapLookupAndDelete('queries', key);
      this.queryEntries.delete(key);
      if (!value) return null;
      const role = this.queryKeyLayout.intNumber(key, 0, 'userid');
      this.evictedByRole.set(role, (this.evictedByRole.get(role) ?? 0n) + 1n);
      this.evictedKeys++;
      roles.add(role);
      const stride = value.length / this.cpus;
      const waitSlots = this.decodeWaitSlots(value, 0, this.queryWaitSlotFields, stride, this.cpus);
      if (waitSlots.length) {
        const queryid = this.queryKeyLayout.int(key, 0, 'queryid');
        const dbid = this.queryKeyLayout.intNumber(key, 0, 'dbid');
        const toplevel = this.queryKeyLayout.intNumber(key, 0, 'toplevel') !== 0;
        this.evictedWaitSlots.push({ userid: role, dbid, toplevel, queryid, waitSlots });
      }
      return this.queryValueLayout.sumPerCpu(value, 0, stride, this.cpus, this.queryNames(metricFields));
    });
    // The map's fill, as BPF sees it, is what it added minus this (bpf/attribution.bpf.h).
    if (roles.size) this.globals.writeBss('query_keys_evicted', this.evictedKeys);
    // Each role's share of the map is what BPF added for it minus this (bpf/attribution.bpf.h).
    for (const role of roles) {
      const key = Buffer.alloc(4);
      key.writeUInt32LE(role);
      const value = Buffer.alloc(8);
      value.writeBigUInt64LE(this.evictedByRole.get(role)!);
      try {
        this.object.mapUpdate('role_evicted', key, value);
      } catch {
        // Full (over 1024 roles seen): that role's share only counts additions, it is refused sooner.
      }
    }
    return values;
  }

  /** Empties a map, if the object has it. */
  clear(name: MapName): void {
    if (!this.object.maps().some((m) => m.name === name)) return;
    const { keys, count } = this.object.mapLookupBatch(name);
    if (count) this.object.mapDeleteBatch(name, keys, count);
  }

  /** The samples of a whole read of `backends` or `exited_backends` (`retired`), the collector's own connections left out. */
  private decodeBackends(
    entries: KeyedEntries<BackendSample>,
    batch: MapBatch,
    metricFields: readonly FieldOf<'metrics'>[],
    retired: boolean,
  ): BackendSample[] {
    const layout = this.backendLayout;
    const names = metricFields.map((f) => `m.${f}` as const);
    const decoded = entries.update(batch, true, (b, i): BackendSample | null => {
      const at = i * b.valueSize;
      const flags = layout.int(b.values, at, 'flags');
      if (flags & BigInt(BackendFlags.BACKEND_EXCLUDED)) return null;
      const key = b.keys.readUInt32LE(i * b.keySize);
      return {
        pid: layout.intNumber(b.values, at, 'pg_pid') || key,
        key,
        retired,
        metrics: layout.sumPerCpu(b.values, at, 0, 1, names),
        queryid: layout.int(b.values, at, 'queryid'),
        backendStartUs: layout.int(b.values, at, 'backend_start_us'),
        taskStartNs: layout.int(b.values, at, 'task_start_ns'),
        exitedNs: layout.int(b.values, at, 'exited_ns'),
        userid: layout.intNumber(b.values, at, 'userid'),
        dbid: layout.intNumber(b.values, at, 'dbid'),
        backendType: layout.intNumber(b.values, at, 'backend_type'),
        identityKnown: (flags & BigInt(BackendFlags.BACKEND_IDENTITY_KNOWN)) !== 0n,
        memoryCgroup: layout.int(b.values, at, 'memory_cgroup'),
        clientWaits: layout.int(b.values, at, 'client_waits'),
        clientWaitNs: layout.int(b.values, at, 'client_wait_ns'),
        unclassedNs: layout.int(b.values, at, 'unclassed_ns'),
        waitSlots: this.decodeWaitSlots(b.values, at, this.waitSlotFields),
      };
    });
    return decoded.filter((sample) => sample !== null);
  }

  /**
   * The used wait slots of the record or queries entry at `at` (`fields`: its WAIT_SLOT_FIELDS),
   * summed by event over its `cpus` copies `stride` bytes apart. Waits first, as BPF fills a slot
   * last (bpf/wait-events.bpf.h).
   */
  private decodeWaitSlots(values: Buffer, at: number, fields: BtfField[], stride = 0, cpus = 1): WaitSlot[] {
    const [waits, ns, runq, event] = fields as [BtfField, BtfField, BtfField, BtfField];
    const slots: WaitSlot[] = [];
    for (let cpu = 0, base = at; cpu < cpus; cpu++, base += stride) {
      for (let i = 0; i < (waits.count ?? 0); i++) {
        const count = values.readBigUInt64LE(base + waits.offset + i * 8);
        if (count === 0n) continue;
        const waitEventInfo = values.readUInt32LE(base + event.offset + i * 4);
        const waitNs = values.readBigUInt64LE(base + ns.offset + i * 8);
        const runqNs = values.readBigUInt64LE(base + runq.offset + i * 8);
        const same = slots.find((slot) => slot.waitEventInfo === waitEventInfo);
        if (!same) slots.push({ waitEventInfo, waits: count, waitNs, runqNs });
        else Object.assign(same, { waits: same.waits + count, waitNs: same.waitNs + waitNs, runqNs: same.runqNs + runqNs });
      }
    }
    return slots;
  }

  /** `metricFields` as struct query_value names them (its `m`). */
  private queryNames(metricFields: readonly FieldOf<'metrics'>[]): FieldOf<'query_value'>[] {
    if (this.queryMetricNames?.of !== metricFields)
      this.queryMetricNames = { of: metricFields, names: metricFields.map((f) => `m.${f}` as FieldOf<'query_value'>) };
    return this.queryMetricNames.names;
  }

  private decodeQueries(batch: MapBatch, complete: boolean, metricFields: readonly FieldOf<'metrics'>[]): QuerySample[] {
    const keys = this.queryKeyLayout;
    const stride = batch.valueSize / this.cpus;
    return this.queryEntries.update(batch, complete, (b, i) => {
      const k = i * b.keySize;
      const queryid = keys.int(b.keys, k, 'queryid');
      const userid = keys.intNumber(b.keys, k, 'userid');
      const dbid = keys.intNumber(b.keys, k, 'dbid');
      const toplevel = keys.intNumber(b.keys, k, 'toplevel') !== 0;
      return {
        queryid,
        userid,
        dbid,
        toplevel,
        id: queryIdentityKey({ userid, dbid, toplevel, queryid }),
        metrics: this.queryValueLayout.sumPerCpu(b.values, i * b.valueSize, stride, this.cpus, this.queryNames(metricFields)),
        waitSlots: this.decodeWaitSlots(b.values, i * b.valueSize, this.queryWaitSlotFields, stride, this.cpus),
        rawKey: b.keys.subarray(k, k + b.keySize),
      };
    });
  }
}

/** A reused sample with the key bytes of the newest read (a view into its buffer). */
function withRawKey<S extends { rawKey: Buffer }>(sample: S, rawKey: Buffer): S {
  return { ...sample, rawKey };
}
