import { describe, expect, it } from 'vitest';
import { DeltaTracker } from '../../src/deltas/delta-tracker.js';

describe('DeltaTracker', () => {
  it('gives the whole value the first time, then increments after each commit', () => {
    const t = new DeltaTracker();
    expect(t.delta('k', [10, 2])).toEqual([10, 2]);
    t.commit('k', [10, 2]);
    expect(t.delta('k', [15, 2])).toEqual([5, 0]);
  });

  it('keeps the baseline when a flush is not committed, so nothing is lost', () => {
    const t = new DeltaTracker();
    t.commit('k', [10]);
    expect(t.delta('k', [12])).toEqual([2]); // write failed: no commit
    expect(t.delta('k', [20])).toEqual([10]);
  });

  it('treats a counter that went backwards as reset and counts it whole', () => {
    const t = new DeltaTracker();
    t.commit('k', [100, 5]);
    expect(t.delta('k', [3, 9])).toEqual([3, 9]);
  });

  it('stays exact past 2^53, and gives increments as numbers again', () => {
    const t = new DeltaTracker();
    const base = 2n ** 60n + 7n;
    t.commit('k', [base, 2n ** 53n - 1n, Number.MAX_SAFE_INTEGER]);
    // A counter crossing 2^53 between two reads, one far beyond it, one from bigint to number form.
    expect(t.delta('k', [base + 3n, 2n ** 53n + 4n, 2n ** 53n + 1n])).toEqual([3, 5, 2]);
    // Reset: counted whole, in whichever form it is exact.
    expect(t.delta('k', [1, 2n ** 53n - 1n, 0])).toEqual([1, 2n ** 53n - 1n, 0]);
  });

  it('forgets keys', () => {
    const t = new DeltaTracker();
    t.commit('k', [1]);
    expect(t.has('k')).toBe(true);
    t.forget('k');
    expect(t.has('k')).toBe(false);
    expect(t.size).toBe(0);
  });
});
