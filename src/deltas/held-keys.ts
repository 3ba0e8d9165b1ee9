/*
 * When entries leave a cumulative map (query keys, histograms, lock waits): once written and
 * quiet for QUIET_FLUSHES flushes without a change, or for one when the map is under pressure
 * (PRESSURE_FILL full, or an entry was refused since the last flush). pg_stat_statements
 * deallocates the same way, least used first; here the table's cumulative row keeps what was
 * evicted, and an entry that comes back starts again from zero in the map and adds to the same
 * row. A map that kept every entry stayed full once statements long gone had filled it.
 */
export const QUIET_FLUSHES = 3;
export const PRESSURE_FILL = 0.9;
/** Evictions per flush at most (one syscall each): a full map of 8192 heals in two flushes. */
export const MAX_EVICTIONS_PER_FLUSH = 4096;

/**
 * The keys a cumulative BPF map holds, least recently changed first, for evicting the quiet ones
 * (query keys in MetricRows; histograms and lock waits in EvictableDeltas): a written flush touches the keys it
 * read, not every key held, and the quiet ones are found at the front. "Quiet for n flushes": no
 * change in the last n written flushes.
 *
 * @example
 * const held = new HeldKeys<QuerySample>();
 * held.written(snapshot.queries, changedKeys, snapshot.queriesComplete, queryKey);
 * held.quietest(3, 4096, (key) => !running.has(key));
 */
export class HeldKeys<Sample> {
  /** Insertion order is the order of last change: a changed key is deleted and set again. */
  private readonly keys = new Map<string, { sample: Sample; changedAt: number }>();
  /** Written flushes so far: the clock of changedAt. */
  private flushes = 0;

  /**
   * A flush was written from a read of `read` (all of the map's keys if `complete`, else those
   * that may have changed); `changed`: the keys whose figures moved.
   */
  written(read: readonly Sample[], changed: ReadonlySet<string>, complete: boolean, keyOf: (sample: Sample) => string): void {
    const now = ++this.flushes;
    const present = complete ? new Set<string>() : null;
    for (const sample of read) {
      const key = keyOf(sample);
      present?.add(key);
      const held = this.keys.get(key);
      if (changed.has(key) || !held) {
        // A key first seen without a change counts as changed now: the order stays by changedAt.
        this.keys.delete(key);
        this.keys.set(key, { sample, changedAt: now });
      } else {
        held.sample = sample;
      }
    }
    if (present) for (const key of this.keys.keys()) if (!present.has(key)) this.keys.delete(key);
  }

  /** Up to `max` keys quiet for `flushes` written flushes or more, least recently changed first, that `evictable` lets go. */
  quietest(flushes: number, max: number, evictable: (key: string) => boolean = () => true): Sample[] {
    const out: Sample[] = [];
    for (const [key, held] of this.keys) {
      if (this.flushes - held.changedAt < flushes || out.length >= max) break;
      if (evictable(key)) out.push(held.sample);
    }
    return out;
  }

  /** The key left the map (evicted). */
  forget(key: string): void {
    this.keys.delete(key);
  }

  get size(): number {
    return this.keys.size;
  }
}
