import type { MapName } from '../bpf/contract.js';
import type { DroppedCounterName } from '../bpf/counters.js';
import type { HistogramSample } from './decode-histograms.js';
import type { BackendSample, EvictedWaitSlots, MapFill, QueryOverflowSample, QuerySample, RawMap } from './map-samples.js';

/**
 * What the BPF maps held at one moment: ONE per flush, shared by every part of it, so no map
 * is read twice in a flush. The maps every flush needs are read when the snapshot is taken; a
 * family's own map (e.g. lock_waits) is read the first time a part asks for it, then kept.
 *
 * @example
 * const snapshot = object.maps.snapshot(METRIC_COLUMNS.map((c) => c.field));
 * snapshot.queries; snapshot.map('lock_waits'); snapshot.map('lock_waits'); // read once
 */
export class MapSnapshot {
  private readonly raw = new Map<MapName, RawMap>();
  /** When it was read (CLOCK_MONOTONIC ns): the maps are read in one go, before it is made. */
  readonly takenNs = process.hrtime.bigint();

  constructor(
    readonly backends: BackendSample[],
    /** The query keys read: those that changed since the last read, or every key when `queriesComplete`. */
    readonly queries: QuerySample[],
    /** Whether `queries` is the whole map (a key it lacks is gone), or only what changed (a key it lacks did not). */
    readonly queriesComplete: boolean,
    /** The histograms read: those that changed since the last read, or every one when `histogramsComplete`. */
    readonly histograms: HistogramSample[],
    /** The BPF side's overflow and failure counters, cumulative since load (query_changes_full and hist_changes_full are in `fill`). */
    readonly counters: Record<DroppedCounterName, bigint>,
    /** How full the bounded maps were, as this snapshot read them. */
    readonly fill: MapFill[],
    private readonly read: <N extends MapName>(name: N) => RawMap<N>,
    /**
     * To be called once the query rows made from this snapshot were written; `all`: no changed
     * row was left for later. Until then the reader reads those keys again (ChangedKeyReads).
     */
    readonly queriesWritten: (all: boolean) => void = () => undefined,
    /** Whether `histograms` is the whole map, or only what changed. */
    readonly histogramsComplete = true,
    /** As queriesWritten, for the histogram rows made from this snapshot. */
    readonly histogramsWritten: (all: boolean) => void = () => undefined,
    /**
     * Figures of keys the queries map refused, taken from the overflow slots by this read or an
     * earlier one whose snapshot was never prepared: owed under their keys until written.
     */
    readonly overflow: readonly QueryOverflowSample[] = [],
    /** To be called once `overflow` is owed elsewhere (MetricRows' remainders): later snapshots leave it out. */
    readonly overflowOwed: () => void = () => undefined,
    /** The wait slots of query keys evicted after an earlier snapshot was read, not yet owed elsewhere. */
    readonly evictedWaitSlots: readonly EvictedWaitSlots[] = [],
    /** To be called once `evictedWaitSlots` is owed elsewhere (WaitEventsPart): later snapshots leave it out. */
    readonly evictedWaitSlotsOwed: () => void = () => undefined,
  ) {}

  /** Every entry of a map with its BTF key/value layout, read at most once per snapshot. */
  map<N extends MapName>(name: N): RawMap<N> {
    let raw = this.raw.get(name) as RawMap<N> | undefined;
    if (!raw) this.raw.set(name, (raw = this.read(name)) as RawMap);
    return raw;
  }
}
