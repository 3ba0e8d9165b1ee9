import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { MapBatch } from '../native/bpf-native.js';
import type { ObjectGlobals } from './object-globals.js';

/** The whole map is read at least this often, whatever BPF noted (a key whose change raced a read and was never touched again). */
const FULL_READ_EVERY_MS = 60_000;

/** One read of the queries map. */
export interface QueryRead {
  /** The entries read: every entry of the map when `complete`, else those BPF noted as changed (and those taken last time). */
  batch: MapBatch;
  /** Whether `batch` is the whole map: a key it lacks is not in the map. */
  complete: boolean;
  /** Keys taken from query_changes (the set BPF notes changed keys in) at this read. */
  taken: number;
}

/**
 * Reads the queries map for a flush: only the keys that changed since the last read, which BPF
 * notes in query_changes (bpf/query-changes.bpf.h), so a flush costs what changed and not what
 * the map holds. The read starts by moving query_read on, so that a key changed after it is
 * noted for the next read; then it takes the noted keys and looks each up. The keys taken at the
 * previous read are looked up once more: an addition that raced that read (noted before the
 * take, added after the lookup) is read now.
 *
 * The whole map is read at the first read, when query_changes overflowed since the last read
 * (counters[query_changes_full]), every FULL_READ_EVERY_MS, and always where the kernel cannot
 * take a hash map's entries in a batch.
 *
 * @example
 * const reads = new QueryReads(object, globals);
 * const { batch, complete } = reads.read(() => readCounters().query_changes_full);
 */
export class QueryReads {
  private readNumber = 0n;
  private lastFullMs = -Infinity;
  private overflowsSeen = 0n;
  /** Packed keys taken at the previous read. */
  private lastTaken: Buffer = Buffer.alloc(0);
  private lastTakenCount = 0;
  /** False once the kernel refused to take query_changes in a batch: every read is whole then. */
  private canTake = true;

  constructor(
    private readonly object: CollectorBpfObject,
    private readonly globals: ObjectGlobals,
  ) {}

  /** `overflows`: counters[query_changes_full] now, read after the take (an overflow before it shows). */
  read(overflows: () => bigint): QueryRead {
    this.readNumber++;
    this.globals.writeBss('query_read', this.readNumber);
    let taken: MapBatch | null = null;
    if (this.canTake) {
      try {
        taken = this.object.mapLookupAndDeleteBatch('query_changes');
      } catch {
        // Before Linux 5.6 hash maps have no lookup-and-delete batch: whole reads from now on.
        this.canTake = false;
      }
    }
    if (!this.canTake) {
      // Emptied all the same, so that noting keys keeps costing a compare and not a count of its overflow.
      const noted = this.object.mapLookupBatch('query_changes');
      if (noted.count) this.object.mapDeleteBatch('query_changes', noted.keys, noted.count);
    }
    const overflowed = overflows();
    const nowMs = performance.now();
    const full = !taken || this.readNumber === 1n || overflowed > this.overflowsSeen || nowMs - this.lastFullMs >= FULL_READ_EVERY_MS;
    this.overflowsSeen = overflowed;
    const keys = full ? null : this.keysToRead(taken!);
    if (taken) {
      this.lastTaken = taken.keys;
      this.lastTakenCount = taken.count;
    }
    if (full) {
      this.lastFullMs = nowMs;
      return { batch: this.object.mapLookupBatch('queries'), complete: true, taken: taken?.count ?? 0 };
    }
    return { batch: this.object.mapLookupKeys('queries', keys!.packed, keys!.count), complete: false, taken: taken!.count };
  }

  /** The map's keys were deleted outside the reads (it was emptied): the next read is whole. */
  reset(): void {
    this.lastFullMs = -Infinity;
  }

  /** The keys taken now and at the previous read, each once, packed. */
  private keysToRead(taken: MapBatch): { packed: Buffer; count: number } {
    const size = taken.keySize;
    if (!this.lastTakenCount) return { packed: taken.keys, count: taken.count };
    const seen = new Set<string>();
    const packed = Buffer.allocUnsafe((taken.count + this.lastTakenCount) * size);
    let count = 0;
    for (const [keys, n] of [[taken.keys, taken.count], [this.lastTaken, this.lastTakenCount]] as const) {
      for (let i = 0; i < n; i++) {
        const id = keys.toString('latin1', i * size, (i + 1) * size);
        if (seen.has(id)) continue;
        seen.add(id);
        keys.copy(packed, count++ * size, i * size, (i + 1) * size);
      }
    }
    return { packed, count };
  }
}
