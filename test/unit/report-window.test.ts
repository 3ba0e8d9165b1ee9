import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors.js';
import { parseReportWindows, parseSpan, parseTimePoint } from '../../src/report/report-window.js';

// Friday 2026-11-27 18:00 in the machine's local time zone (chrono reads times without a zone as local).
const NOW = new Date(2026, 10, 27, 18, 0, 0).getTime();
const local = (d: number, h: number, m = 0) => new Date(2026, 10, d, h, m, 0).getTime();

describe('report windows', () => {
  it('reads the times a DBA types, as the calendar says, and ISO 8601', () => {
    expect(parseTimePoint('tuesday 09:00', '--since', NOW)).toBe(local(24, 9));
    expect(parseTimePoint('yesterday 14:30', '--since', NOW)).toBe(local(26, 14, 30));
    expect(parseTimePoint('3 hours ago', '--since', NOW)).toBe(NOW - 3 * 3_600_000);
    expect(parseTimePoint('2026-11-24T09:00:00Z', '--since', NOW)).toBe(Date.UTC(2026, 10, 24, 9));
  });

  it('refuses text that is not wholly one time, in one line naming the option', () => {
    for (const text of ['blorp', 'garbage tuesday', 'tuesday and wednesday', '']) {
      expect(() => parseTimePoint(text, '--since', NOW)).toThrow(UserError);
    }
    expect(() => parseTimePoint('blorp', '--until', NOW)).toThrow(/^--until 'blorp': not a time/);
  });

  it('reads spans in words and in short units; a date is not a span', () => {
    expect(parseSpan('1 week', '--baseline')).toBe(7 * 86_400_000);
    expect(parseSpan('2 days', '--baseline')).toBe(2 * 86_400_000);
    expect(parseSpan('24h', '--baseline')).toBe(86_400_000);
    expect(parseSpan('1.5 hours', '--baseline')).toBe(5_400_000);
    for (const bad of ['tuesday', 'week', '0 days', '-1 week', '3 fortnights'])
      expect(() => parseSpan(bad, '--baseline')).toThrow(/--baseline/);
  });

  it('shifts the window back for --baseline, and takes explicit ranges', () => {
    expect(parseReportWindows({ since: 'tuesday 09:00', baseline: '1 week' }, NOW)).toEqual({
      window: { fromMs: local(24, 9), toMs: NOW },
      baseline: { fromMs: local(17, 9), toMs: NOW - 7 * 86_400_000 },
    });
    expect(
      parseReportWindows({ window: '2026-11-26 10:00..2026-11-26 11:00', baselineWindow: '2026-11-25 10:00..2026-11-25 11:00' }, NOW),
    ).toEqual({
      window: { fromMs: local(26, 10), toMs: local(26, 11) },
      baseline: { fromMs: local(25, 10), toMs: local(25, 11) },
    });
    // No window: the last hour; an open end: now.
    expect(parseReportWindows({}, NOW)).toEqual({ window: { fromMs: NOW - 3_600_000, toMs: NOW }, baseline: null });
    expect(parseReportWindows({ window: '2026-11-27 17:00..' }, NOW).window).toEqual({ fromMs: local(27, 17), toMs: NOW });
  });

  it('refuses contradictory, reversed, future and overlapping periods', () => {
    expect(() => parseReportWindows({ since: 'yesterday', window: 'a..b' }, NOW)).toThrow(/--window and --since/);
    expect(() => parseReportWindows({ since: 'yesterday', baseline: '1 day', baselineWindow: 'a..b' }, NOW)).toThrow(
      /--baseline and --baseline-window/,
    );
    expect(() => parseReportWindows({ window: '2026-11-26 11:00..2026-11-26 10:00' }, NOW)).toThrow(/not before the end/);
    expect(() => parseReportWindows({ window: '2026-11-26 10:00' }, NOW)).toThrow(/expected START\.\.END/);
    expect(() => parseReportWindows({ since: 'next friday' }, NOW)).toThrow(/future|not before/);
    expect(() => parseReportWindows({ since: '2 hours ago', baseline: '1 hour' }, NOW)).toThrow(/overlaps the window/);
  });
});
