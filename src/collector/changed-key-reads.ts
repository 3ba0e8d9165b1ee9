import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { MapBatch } from '../native/bpf-native.js';
import type { ObjectGlobals } from './object-globals.js';

/** A map BPF notes changed keys of, the set it notes them in, and the read number that set's notes go by. */
export interface ChangedKeys {
  map: 'queries' | 'histograms';
  changes: 'query_changes' | 'hist_changes';
  readNumber: 'query_read' | 'hist_read';
}

/** The query keys (bpf/query-changes.bpf.h). */
export const QUERY_CHANGES: ChangedKeys = { map: 'queries', changes: 'query_changes', readNumber: 'query_read' };
/** The (query, kind) histograms (bpf/hist.bpf.h). */
export const HISTOGRAM_CHANGES: ChangedKeys = { map: 'histograms', changes: 'hist_changes', readNumber: 'hist_read' };

/** The whole map is read at least this often, whatever BPF noted (a key whose change raced a read and was never touched again). */
const FULL_READ_EVERY_MS = 60_000;

/** One read of a map whose changed keys BPF notes. */
export interface ChangedKeyRead {
  /** The entries read: every entry of the map when `complete`, else those BPF noted as changed (and those read again). */
  batch: MapBatch;
  /** Whether `batch` is the whole map: a key it lacks is not in the map. */
  complete: boolean;
  /** Keys taken from the set BPF notes changed keys in (query_changes, hist_changes) at this read. */
  taken: number;
}

/** Packed keys of the map. */
interface Keys {
  packed: Buffer;
  count: number;
}

const NO_KEYS: Keys = { packed: Buffer.alloc(0), count: 0 };

/**
 * Reads a map for a flush (queries, histograms): only the keys that changed since the last read,
 * which BPF notes in a set of its own (query_changes, bpf/query-changes.bpf.h; hist_changes,
 * bpf/hist.bpf.h), so a flush costs what changed and not what the map holds. The read starts by
 * moving the set's read number on, so that a key changed after it is noted for the next read;
 * then it takes the noted keys and looks each up.
 *
 * Some keys are read again: those taken at the previous read, for an addition that raced it
 * (noted before the take, added after the lookup); and, until the flush made from a read says it
 * was written (written()), every key that read read, so that a failed flush loses nothing. A
 * flush that left rows for later (the row budget) makes the next read whole.
 *
 * The whole map is also read at the first read, when the set overflowed since the last read
 * (counters[query_changes_full], [hist_changes_full]), every FULL_READ_EVERY_MS, when more than
 * half the keys it holds are to be read, and always where the kernel cannot take a hash map's
 * entries in a batch.
 *
 * @example
 * const reads = new ChangedKeyReads(object, globals, QUERY_CHANGES);
 * const { batch, complete } = reads.read(() => readCounters().query_changes_full, heldKeys);
 * // ... once the flush made from it is written:
 * reads.written(true);
 */
export class ChangedKeyReads {
  private readNumber = 0n;
  private lastFullMs = -Infinity;
  private overflowsSeen = 0n;
  private wholeDue = false;
  /** Keys the next read reads again, whatever BPF noted. */
  private again: Keys = NO_KEYS;
  /** The last read, until its flush is written: all it read ('whole', or its keys), and what it took. */
  private unwritten: { read: Keys | 'whole'; taken: Keys } | null = null;
  /** False once the kernel refused to take the set in a batch: every read is whole then. */
  private canTake = true;

  constructor(
    private readonly object: CollectorBpfObject,
    private readonly globals: ObjectGlobals,
    private readonly keys: ChangedKeys,
  ) {}

  /**
   * `overflows`: the set's overflow counter now, read after the take (an overflow before it
   * shows). `held`: keys the map holds, as far as the collector knows.
   */
  read(overflows: () => bigint, held: number): ChangedKeyRead {
    // The flush made from the last read was not written: what it read is read again.
    if (this.unwritten?.read === 'whole') this.wholeDue = true;
    else if (this.unwritten) this.again = this.unwritten.read;
    this.readNumber++;
    this.globals.writeBss(this.keys.readNumber, this.readNumber);
    const taken = this.take();
    const overflowed = overflows();
    const nowMs = performance.now();
    const whole =
      !taken || this.wholeDue || this.readNumber === 1n || overflowed > this.overflowsSeen || nowMs - this.lastFullMs >= FULL_READ_EVERY_MS;
    this.overflowsSeen = overflowed;
    const takenKeys = taken ? { packed: taken.keys, count: taken.count } : NO_KEYS;
    // Past half the map, one batch read of every key is cheaper than a lookup per key
    // (bench/journal/flush-cost.md#arrays-in-binary);
    // the union is never smaller than what was taken, so that alone can decide it.
    const keys = whole || takenKeys.count * 2 > held ? null : union(takenKeys, this.again, taken!.keySize);
    if (!keys || keys.count * 2 > held) {
      this.lastFullMs = nowMs;
      this.wholeDue = false;
      this.unwritten = { read: 'whole', taken: takenKeys };
      return { batch: this.object.mapLookupBatch(this.keys.map), complete: true, taken: takenKeys.count };
    }
    this.unwritten = { read: keys, taken: takenKeys };
    return { batch: this.object.mapLookupKeys(this.keys.map, keys.packed, keys.count), complete: false, taken: takenKeys.count };
  }

  /**
   * The flush made from the last read was written. `all`: every changed row went out; otherwise
   * rows were left for later (their keys are not noted again), so the next read is whole.
   */
  written(all: boolean): void {
    if (!this.unwritten) return;
    this.again = this.unwritten.taken;
    this.unwritten = null;
    if (!all) this.wholeDue = true;
  }

  /** Takes the keys noted since the last read; null where the kernel cannot. */
  private take(): MapBatch | null {
    if (this.canTake) {
      try {
        return this.object.mapLookupAndDeleteBatch(this.keys.changes);
      } catch {
        // Before Linux 5.6 hash maps have no lookup-and-delete batch: whole reads from now on.
        this.canTake = false;
      }
    }
    // Emptied all the same, so that noting keys keeps costing a compare and not a count of its overflow.
    const noted = this.object.mapLookupBatch(this.keys.changes);
    if (noted.count) this.object.mapDeleteBatch(this.keys.changes, noted.keys, noted.count);
    return null;
  }
}

/** The keys of `a` and of `b`, each once. */
function union(a: Keys, b: Keys, size: number): Keys {
  if (!b.count) return a;
  if (!a.count) return b;
  const seen = new Set<string>();
  const packed = Buffer.allocUnsafe((a.count + b.count) * size);
  let count = 0;
  for (const { packed: keys, count: n } of [a, b]) {
    for (let i = 0; i < n; i++) {
      const id = keys.toString('latin1', i * size, (i + 1) * size);
      if (seen.has(id)) continue;
      seen.add(id);
      keys.copy(packed, count++ * size, i * size, (i + 1) * size);
    }
  }
  return { packed, count };
}
