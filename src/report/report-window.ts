import * as chrono from 'chrono-node';
import { UserError } from '../errors.js';

/** A half-open range of time [fromMs, toMs), in ms since the epoch. */
export interface TimeRange {
  fromMs: number;
  toMs: number;
}

export interface ReportWindows {
  window: TimeRange;
  /** null: no baseline asked for. */
  baseline: TimeRange | null;
}

/** The options of `report` that say which time to read, as given on the command line. */
export interface WindowOptions {
  since?: string;
  until?: string;
  window?: string;
  baseline?: string;
  baselineWindow?: string;
}

/** The window when none is given: the last hour. */
export const DEFAULT_WINDOW_MS = 3_600_000;

/**
 * A point in time as a DBA says it: chrono-node reads natural language ("tuesday 09:00",
 * "yesterday 14:00", "3 hours ago", "now") and ISO 8601 ("2026-11-24 09:00", with or without a
 * zone), in the local time zone unless the text names one. The whole text must be one date:
 * chrono finds dates inside free text, so "garbage tuesday" would otherwise pass as tuesday.
 * A weekday without "last"/"next" is the closest one, which may lie ahead: the callers refuse
 * a window that starts in the future rather than guess a week back.
 */
export function parseTimePoint(text: string, flag: string, nowMs: number): number {
  const trimmed = text.trim();
  const results = chrono.parse(trimmed, new Date(nowMs));
  const only = results.length === 1 ? results[0]! : null;
  if (only?.index !== 0 || only.text.length !== trimmed.length) {
    throw new UserError(`${flag} '${text}': not a time (e.g. 'tuesday 09:00', 'yesterday 14:00', '3 hours ago', '2026-11-24 09:00')`);
  }
  return only.start.date().getTime();
}

const SPAN_UNITS_MS: Record<string, number> = {
  ms: 1,
  millisecond: 1,
  milliseconds: 1,
  s: 1000,
  sec: 1000,
  secs: 1000,
  second: 1000,
  seconds: 1000,
  m: 60_000,
  min: 60_000,
  mins: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000,
  d: 86_400_000,
  day: 86_400_000,
  days: 86_400_000,
  w: 604_800_000,
  week: 604_800_000,
  weeks: 604_800_000,
};

/**
 * How far back the baseline is: a number and a unit ("1 week", "2 days", "24h", "7d"). Our own
 * small grammar rather than chrono's: a span is not a date, and chrono reads "1 week" as a date
 * a week from now.
 */
export function parseSpan(text: string, flag: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]+)$/i.exec(text.trim());
  const unit = match ? SPAN_UNITS_MS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined || Number(match[1]) <= 0) {
    throw new UserError(`${flag} '${text}': expected a positive span such as '1 week', '2 days', '24h' or '30 min'`);
  }
  return Number(match[1]) * unit;
}

/** 'A..B' (B empty: now). */
function parseRange(text: string, flag: string, nowMs: number): TimeRange {
  const at = text.indexOf('..');
  if (at < 0) throw new UserError(`${flag} '${text}': expected START..END, e.g. '2026-11-24 09:00..2026-11-24 10:00' (END empty: now)`);
  const fromMs = parseTimePoint(text.slice(0, at), flag, nowMs);
  const end = text.slice(at + 2);
  const toMs = end.trim() === '' ? nowMs : parseTimePoint(end, flag, nowMs);
  return checked({ fromMs, toMs }, flag, text, nowMs);
}

function checked(range: TimeRange, flag: string, text: string, nowMs: number): TimeRange {
  if (range.fromMs >= range.toMs)
    throw new UserError(`${flag} '${text}': the start (${iso(range.fromMs)}) is not before the end (${iso(range.toMs)})`);
  if (range.fromMs > nowMs)
    throw new UserError(`${flag} '${text}': starts in the future (${iso(range.fromMs)}); say 'last tuesday' for one already past`);
  return range;
}

/**
 * The window and baseline `report` reads: `--since T [--until T]` or `--window A..B`
 * (default: the last hour), and `--baseline SPAN` (the same window that long earlier) or
 * `--baseline-window C..D`. Contradictory or malformed options are a UserError naming them.
 */
export function parseReportWindows(options: WindowOptions, nowMs: number): ReportWindows {
  if (options.window !== undefined && (options.since !== undefined || options.until !== undefined)) {
    throw new UserError('--window and --since/--until: give one of them');
  }
  if (options.baseline !== undefined && options.baselineWindow !== undefined) {
    throw new UserError('--baseline and --baseline-window: give one of them');
  }
  let window: TimeRange;
  if (options.window !== undefined) window = parseRange(options.window, '--window', nowMs);
  else {
    const toMs = options.until === undefined ? nowMs : parseTimePoint(options.until, '--until', nowMs);
    const fromMs = options.since === undefined ? toMs - DEFAULT_WINDOW_MS : parseTimePoint(options.since, '--since', nowMs);
    window = checked({ fromMs, toMs }, options.since === undefined ? '--until' : '--since', options.since ?? options.until ?? '', nowMs);
  }
  let baseline: TimeRange | null = null;
  if (options.baseline !== undefined) {
    const shift = parseSpan(options.baseline, '--baseline');
    baseline = { fromMs: window.fromMs - shift, toMs: window.toMs - shift };
  } else if (options.baselineWindow !== undefined) {
    baseline = parseRange(options.baselineWindow, '--baseline-window', nowMs);
  }
  // A history row belongs to one period: an overlap would compare a time with itself.
  if (baseline && baseline.fromMs < window.toMs && window.fromMs < baseline.toMs) {
    throw new UserError(
      `the baseline ${iso(baseline.fromMs)}..${iso(baseline.toMs)} overlaps the window ${iso(window.fromMs)}..${iso(window.toMs)}: shift it back at least the window's length`,
    );
  }
  return { window, baseline };
}

/** A time as the report prints it: ISO 8601 to the second, UTC. */
export function iso(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}
