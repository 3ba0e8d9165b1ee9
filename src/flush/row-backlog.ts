/**
 * Which rows a flush under its row budget writes first: those left out of the most flushes. A
 * table's rows come in map order, the same every flush, so without this the rows at the end of
 * the map were left out again and again while the budget was small (a statement's calls missing
 * from query_stats for as long as the budget took to grow back); with it, a row waits at most
 * until the rows ahead of it are written.
 *
 * Bounded: it keeps the rows of the current candidates only.
 *
 * @example
 * const chosen = backlog.choose(candidates, (c) => c.key, budget);
 * // once written: backlog.written(chosen.map((c) => c.key));
 */
export class RowBacklog {
  /** Rows by key: flushes they were left out of since they were last written. */
  private waiting = new Map<string, number>();

  /**
   * The first `budget` of `candidates`: by `classOf` (lower first: exited processes before live
   * ones, as writing them frees map entries), then longest waiting, then map order; the rest
   * wait one flush more. Every call replaces what is kept, so call it once per flush with all
   * of the table's candidates.
   */
  choose<T>(candidates: readonly T[], keyOf: (candidate: T) => string, budget: number, classOf: (candidate: T) => number = () => 0): T[] {
    const next = new Map<string, number>();
    if (candidates.length <= budget) {
      for (const c of candidates) {
        const waited = this.waiting.get(keyOf(c));
        if (waited) next.set(keyOf(c), waited);
      }
      this.waiting = next;
      return [...candidates];
    }
    const ranked = candidates
      .map((candidate, index) => ({
        candidate,
        index,
        key: keyOf(candidate),
        rank: classOf(candidate),
        waited: this.waiting.get(keyOf(candidate)) ?? 0,
      }))
      .sort((a, b) => a.rank - b.rank || b.waited - a.waited || a.index - b.index);
    ranked.forEach((r, rank) => {
      // Chosen ones keep their wait until written: the flush may still fail.
      if (rank >= budget) next.set(r.key, r.waited + 1);
      else if (r.waited) next.set(r.key, r.waited);
    });
    this.waiting = next;
    return ranked.slice(0, budget).map((r) => r.candidate);
  }

  /** These rows were written: they wait no more. */
  written(keys: Iterable<string>): void {
    for (const key of keys) this.waiting.delete(key);
  }
}
