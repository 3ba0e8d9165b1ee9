import { DeltaTracker } from './delta-tracker.js';
import { HeldKeys, MAX_EVICTIONS_PER_FLUSH, QUIET_FLUSHES } from './held-keys.js';
import { isZero, type ExactInt } from '../exact-int.js';

/** One entry of a cumulative BPF map as a read decoded it. */
export interface CumulativeEntry {
  /** Names the entry across reads (e.g. its key's bytes in hex). */
  readonly id: string;
  /** The key as the map holds it, for deleting it. */
  readonly rawKey: Buffer;
  /** Its counters, cumulative since the entry was created. */
  readonly counts: readonly ExactInt[];
}

/** An entry's increments since the last written flush. */
export interface EntryIncrement<Entry> {
  entry: Entry;
  delta: ExactInt[];
}

/**
 * The increments of a cumulative map that a flush reads whole (lock waits) or by changed keys
 * (histograms, ChangedKeyReads), with
 * the two-step commit of DeltaTracker, and eviction: after a written flush, evict() deletes the
 * quiet entries; what one gained between the flush's read and its deletion is owed to the next
 * flush, so the table's cumulative row loses nothing. An entry that comes back starts from zero.
 *
 * @example
 * const deltas = new EvictableDeltas<LockEntry>();
 * const { increments, commit } = deltas.prepare(entries); // a remainder may share an id with a new increment
 * // once written: commit(), then deltas.evict(refusedSinceLastFlush, (keys) => deleteAndReturn(keys))
 */
export class EvictableDeltas<Entry extends CumulativeEntry> {
  private readonly tracker = new DeltaTracker();
  private readonly held = new HeldKeys<Entry>();
  /** What evicted entries held beyond their written baseline, owed to the next flush. */
  private readonly remainders = new Map<string, EntryIncrement<Entry>>();
  /** Entries deleted from the map since load. */
  evicted = 0;

  /** `read`: the whole map when `complete`, else the entries that may have changed since the last read (the others did not). */
  prepare(read: readonly Entry[], complete = true): { increments: EntryIncrement<Entry>[]; commit: () => void } {
    const increments: EntryIncrement<Entry>[] = [];
    const changed = new Set<string>();
    for (const entry of read) {
      if (this.tracker.isBaseline(entry.id, entry.counts)) continue;
      const delta = this.tracker.delta(entry.id, entry.counts);
      if (delta.every(isZero)) continue;
      increments.push({ entry, delta });
      changed.add(entry.id);
    }
    const owed = [...this.remainders.values()];
    return {
      increments: [...increments, ...owed],
      commit: () => {
        for (const { entry } of increments) this.tracker.commit(entry.id, entry.counts);
        for (const { entry } of owed) this.remainders.delete(entry.id);
        this.held.written(read, changed, complete, (entry) => entry.id);
      },
    };
  }

  /**
   * After a written flush (its commit()): deletes the entries quiet for QUIET_FLUSHES flushes
   * (for one under `pressure`) through `evict`, which returns what each held when deleted
   * (MapEviction.delete; null: nothing was deleted, the entries stay held).
   */
  evict(pressure: boolean, evict: (rawKeys: Buffer[]) => Array<Entry | null> | null): void {
    // Written and unchanged since, or never written because it never counted anything (read between its creation and its first count).
    const quiet = this.held
      .quietest(pressure ? 1 : QUIET_FLUSHES, MAX_EVICTIONS_PER_FLUSH)
      .filter((entry) => (this.tracker.has(entry.id) ? this.tracker.delta(entry.id, entry.counts) : entry.counts).every(isZero));
    if (!quiet.length) return;
    const held = evict(quiet.map((entry) => entry.rawKey));
    if (!held) return;
    quiet.forEach((entry, i) => {
      const value = held[i];
      this.held.forget(entry.id);
      if (!value) return;
      this.evicted++;
      const delta = this.tracker.delta(entry.id, value.counts);
      this.tracker.forget(entry.id);
      if (!delta.every(isZero)) this.remainders.set(entry.id, { entry: value, delta });
    });
  }

  /** Whether a flush would find nothing to do here: no remainder owed and, while `evicting`, no entry left to evict. */
  settled(evicting: boolean): boolean {
    return this.remainders.size === 0 && (!evicting || this.held.size === 0);
  }
}
