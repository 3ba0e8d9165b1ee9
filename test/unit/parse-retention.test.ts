import { describe, expect, it } from 'vitest';
import { parseCli } from '../../src/cli/parse-args.js';
import { parseRetention } from '../../src/cli/parse-retention.js';
import { UserError } from '../../src/errors.js';
import { HistoryRetention } from '../../src/retention/history-retention.js';

describe('parseRetention', () => {
  it('reads seconds to days, and off', () => {
    expect(parseRetention('7d')).toBe(7 * 86_400_000);
    expect(parseRetention('12h')).toBe(12 * 3_600_000);
    expect(parseRetention('30m')).toBe(1_800_000);
    expect(parseRetention('1.5s')).toBe(1500);
    expect(parseRetention('off')).toBeNull();
  });

  it('rejects garbage, bare numbers and less than a second with one clear line', () => {
    for (const bad of ['', 'week', '7', '-1d', '500ms', '0s', '1 d']) {
      expect(() => parseRetention(bad), bad).toThrow(UserError);
      expect(() => parseRetention(bad), bad).toThrow(/--history-retention/);
    }
  });

  it('is a run option that is absent unless given', () => {
    expect(parseCli(['run', '--history-retention', '2d'])).toMatchObject({ historyRetentionMs: 2 * 86_400_000 });
    expect(parseCli(['run', '--history-retention', 'off'])).toMatchObject({ historyRetentionMs: null });
    expect(parseCli(['run'])).not.toHaveProperty('historyRetentionMs');
  });
});

describe('HistoryRetention', () => {
  it('partitions a seventh of the retention wide, whole seconds from 1 s to 1 day', () => {
    expect(new HistoryRetention(7 * 86_400_000).widthMs).toBe(86_400_000);
    expect(new HistoryRetention(30 * 86_400_000).widthMs).toBe(86_400_000);
    expect(new HistoryRetention(3_600_000).widthMs).toBe(514_000);
    expect(new HistoryRetention(3000).widthMs).toBe(1000);
    expect(new HistoryRetention(60_000, 15_000).widthMs).toBe(15_000);
  });

  it('is due at once, then again after a quarter partition (at most 5 minutes)', async () => {
    const retention = new HistoryRetention(7 * 86_400_000);
    expect(retention.due()).toBe(true);
    const db = { transaction: () => ({ execute: async () => ({ created: 0, dropped: 0 }) }) };
    await retention.maintain(db as never);
    expect(retention.due()).toBe(false);
    expect(retention.due(Date.now() + 5 * 60_000 + 1)).toBe(true);
    retention.soon();
    expect(retention.due()).toBe(true);
  });
});
