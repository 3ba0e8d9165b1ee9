import { describe, expect, it } from 'vitest';
import { blockRatios, splitBlocks } from '../../bench/alternating-blocks.js';
import { parseProgress } from '../../bench/pgbench.js';

/** One progress sample per second from `from` to `to` (the second ending at each), at `tps`. */
const seconds = (from: number, to: number, tps: (at: number) => number) =>
  Array.from({ length: to - from + 1 }, (_, i) => ({ at: from + i, tps: tps(from + i) }));

describe('alternating blocks', () => {
  it('reads pgbench -P 1 --progress-timestamp lines and nothing else', () => {
    const stderr = [
      'pgbench (15.18)',
      'progress: 1700000001.000 s, 41000.5 tps, lat 0.195 ms stddev 0.062, 0 failed',
      'progress: 1700000002.001 s, 40500.0 tps, lat 0.197 ms stddev 0.060, 0 failed',
    ].join('\n');
    expect(parseProgress(stderr)).toEqual([
      { at: 1700000001, tps: 41000.5 },
      { at: 1700000002.001, tps: 40500 },
    ]);
  });

  it('drops the second a switch falls in and the one after it, and keeps each state apart', () => {
    // Switches at 10.5 (off) and 16.5 (on); samples end at whole seconds 1..22.
    const toggles = [
      { at: 10.5, on: false },
      { at: 16.5, on: true },
    ];
    const blocks = splitBlocks(
      seconds(1, 22, (at) => at),
      toggles,
      true,
    );
    expect(blocks).toEqual([
      { on: true, tps: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] },
      // 11 (10..11 holds the switch) and 12 (the switch's own second after it) are dropped
      { on: false, tps: [13, 14, 15, 16] },
      { on: true, tps: [19, 20, 21, 22] },
    ]);
  });

  it('sets each on-block against the mean of the off-blocks on either side', () => {
    const toggles = [10, 16, 22, 28, 34].map((at, i) => ({ at: at + 0.5, on: i % 2 === 1 }));
    // Off at 100 tps rising to 110, on at 95: drift cancels between the neighbours.
    const tps = (at: number) => (toggles.filter((t) => t.at <= at - 1).at(-1)?.on === false ? 100 + (at - 10) / 2.4 : 95);
    const blocks = splitBlocks(seconds(1, 40, tps), toggles, true);
    expect(blocks.map((b) => b.on)).toEqual([true, false, true, false, true, false]);
    const ratios = blockRatios(blocks);
    expect(ratios).toHaveLength(2);
    for (const r of ratios) {
      expect(r.tpsOn).toBe(95);
      expect(r.ratio).toBeCloseTo(95 / r.tpsOff, 10);
      expect(r.tpsOff).toBeGreaterThan(100);
    }
    // The first on-block (the settle) has no off-block before it and is not a ratio.
    expect(ratios[0]!.tpsOff).toBeLessThan(ratios[1]!.tpsOff);
  });
});
