import { describe, expect, it } from 'vitest';
import { DeltaTracker } from '../../src/flush/delta-tracker.js';

describe('DeltaTracker', () => {
  it('gives the whole value the first time, then increments after each commit', () => {
    const t = new DeltaTracker();
    expect(t.delta('k', [10n, 2n])).toEqual([10n, 2n]);
    t.commit('k', [10n, 2n]);
    expect(t.delta('k', [15n, 2n])).toEqual([5n, 0n]);
  });

  it('keeps the baseline when a flush is not committed, so nothing is lost', () => {
    const t = new DeltaTracker();
    t.commit('k', [10n]);
    expect(t.delta('k', [12n])).toEqual([2n]); // write failed: no commit
    expect(t.delta('k', [20n])).toEqual([10n]);
  });

  it('treats a counter that went backwards as reset and counts it whole', () => {
    const t = new DeltaTracker();
    t.commit('k', [100n, 5n]);
    expect(t.delta('k', [3n, 9n])).toEqual([3n, 9n]);
  });

  it('forgets keys', () => {
    const t = new DeltaTracker();
    t.commit('k', [1n]);
    expect(t.has('k')).toBe(true);
    t.forget('k');
    expect(t.has('k')).toBe(false);
    expect(t.size).toBe(0);
  });
});
