import { BACKEND_EXCLUDED, BACKEND_IDENTITY_KNOWN, COUNTER_NAMES, MAPS, type CounterName } from '../bpf/mirror.js';
import { RecordLayout } from '../bpf/record-layout.js';
import type { BpfObject, MapBatch } from '../native/bpf-native.js';
import { decodeHistograms, type HistogramSample } from './decode-histograms.js';
import type { BackendSample, MapFill, QuerySample } from './map-samples.js';
import { MapSnapshot } from './map-snapshot.js';

/** A batch read of one map with its BTF key/value layouts, for the families' own decoders. */
export interface RawMap {
  batch: MapBatch;
  key: RecordLayout;
  value: RecordLayout;
}

/** The maps whose capacity bounds what the collector can track (bpf_stats.health.map_fill). */
const FILL_MAPS = [MAPS.backends, MAPS.queries, MAPS.histograms];

/**
 * Reads the collector object's maps as typed samples, with field offsets from its BTF.
 * A flush reads through snapshot(), once.
 *
 * @example
 * const snapshot = object.maps.snapshot(['on_cpu_ns', 'runq_ns']);
 */
export class MapReaders {
  private readonly backendLayout: RecordLayout;
  private readonly queryKeyLayout: RecordLayout;
  private readonly queryValueLayout: RecordLayout;

  constructor(
    private readonly object: BpfObject,
    private readonly cpus: number,
  ) {
    this.backendLayout = new RecordLayout(object.mapLayout(MAPS.backends).value, 'struct backend_record');
    const queries = object.mapLayout(MAPS.queries);
    this.queryKeyLayout = new RecordLayout(queries.key, 'struct query_key');
    this.queryValueLayout = new RecordLayout(queries.value, 'struct metrics');
  }

  /** Reads the maps every flush needs; `metricFields`: the members of struct metrics to read, in column order. */
  snapshot(metricFields: readonly string[]): MapSnapshot {
    const backends = this.object.mapLookupBatch(MAPS.backends);
    const queries = this.object.mapLookupBatch(MAPS.queries);
    const histograms = this.object.mapLookupBatch(MAPS.histograms);
    const counts: Record<string, number> = { [MAPS.backends]: backends.count, [MAPS.queries]: queries.count, [MAPS.histograms]: histograms.count };
    const capacity = new Map(this.object.maps().map((m) => [m.name, m.maxEntries]));
    const fill: MapFill[] = FILL_MAPS.filter((name) => capacity.has(name)).map((name) => ({ map: name, entries: counts[name]!, maxEntries: capacity.get(name)! }));
    return new MapSnapshot(
      this.decodeBackends(backends, metricFields),
      this.decodeQueries(queries, metricFields),
      decodeHistograms(histograms, this.object.mapLayout(MAPS.histograms), this.cpus),
      this.readCounters(),
      fill,
      (name) => this.readMap(name),
    );
  }

  /** Every entry of a map with its BTF key/value layout. */
  readMap(name: string): RawMap {
    const layout = this.object.mapLayout(name);
    return { batch: this.object.mapLookupBatch(name), key: new RecordLayout(layout.key, `${name} key`), value: new RecordLayout(layout.value, `${name} value`) };
  }

  /** The per-query histograms (bpf/pgstats.h, struct hist), summed over CPUs. */
  readHistograms(): HistogramSample[] {
    return decodeHistograms(this.object.mapLookupBatch(MAPS.histograms), this.object.mapLayout(MAPS.histograms), this.cpus);
  }

  /** Overflow and failure counters of the BPF side (bpf/pgstats.h, enum counter_index). */
  readCounters(): Record<CounterName, bigint> {
    const out = {} as Record<CounterName, bigint>;
    COUNTER_NAMES.forEach((name, index) => {
      const key = Buffer.alloc(4);
      key.writeUInt32LE(index);
      out[name] = this.object.mapLookup(MAPS.counters, key)?.readBigUInt64LE(0) ?? 0n;
    });
    return out;
  }

  /** Empties a map, if the object has it. */
  clear(name: string): void {
    if (!this.object.maps().some((m) => m.name === name)) return;
    const { keys, count } = this.object.mapLookupBatch(name);
    if (count) this.object.mapDeleteBatch(name, keys, count);
  }

  private decodeBackends(batch: MapBatch, metricFields: readonly string[]): BackendSample[] {
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

  private decodeQueries(batch: MapBatch, metricFields: readonly string[]): QuerySample[] {
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
        metrics: this.queryValueLayout.sumPerCpu(batch.values, i * batch.valueSize, stride, this.cpus, [...metricFields]),
      });
    }
    return samples;
  }
}
