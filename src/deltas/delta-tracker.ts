import { subtractExact, type ExactInt } from '../exact-int.js';

/**
 * Turns cumulative counters (as BPF keeps them) into per-flush deltas, with a two-step
 * commit: the baseline moves only once a flush was written, so a failed write is retried with
 * the same data at the next flush instead of being lost.
 *
 * @example
 * const tracker = new DeltaTracker();
 * const delta = tracker.delta('q:42', [10, 3]); // [10, 3]
 * tracker.commit('q:42', [10, 3]);
 * tracker.delta('q:42', [15, 3]);                // [5, 0]
 */
export class DeltaTracker {
  private readonly baselines = new Map<string, readonly ExactInt[]>();

  /** current - baseline; a counter below its baseline was reset (object reloaded) and counts whole. */
  delta(key: string, current: readonly ExactInt[]): ExactInt[] {
    const base = this.baselines.get(key);
    if (!base) return [...current];
    // Plain loops: a flush runs this for every changed row (10,000 in one flush is a goal).
    const n = current.length;
    for (let i = 0; i < n; i++) if (current[i]! < (base[i] ?? 0)) return [...current];
    const out = new Array<ExactInt>(n);
    for (let i = 0; i < n; i++) out[i] = subtractExact(current[i]!, base[i] ?? 0);
    return out;
  }

  /** `current` becomes the baseline (kept as it is: callers do not change a sample's arrays). */
  commit(key: string, current: readonly ExactInt[]): void {
    this.baselines.set(key, current);
  }

  /** Whether `current` is the very array last committed for `key` (so its delta is zero without looking). */
  isBaseline(key: string, current: readonly ExactInt[]): boolean {
    return this.baselines.get(key) === current;
  }

  has(key: string): boolean {
    return this.baselines.has(key);
  }

  forget(key: string): void {
    this.baselines.delete(key);
  }

  keys(): IterableIterator<string> {
    return this.baselines.keys();
  }

  get size(): number {
    return this.baselines.size;
  }
}
