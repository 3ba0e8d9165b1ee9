import { TOTAL_COLUMN, type PeriodSums, type ReportColumn, type ReportData, type ReportStatement } from './report-read.js';
import type { TimeRange } from './report-window.js';

/** Names a DBA reads; a column not listed here (a new family's) is named after itself. */
const LABELS: Record<string, string> = {
  total_time_ms: 'total',
  on_cpu_ms: 'on CPU',
  runq_wait_ms: 'run queue',
  io_wait_ms: 'IO',
  lock_wait_ms: 'lock',
  lwlock_wait_ms: 'LWLock',
  other_wait_ms: 'other waits',
  reclaim_ms: 'reclaim',
  compaction_stall_ms: 'compaction',
  writeback_throttle_ms: 'writeback throttling',
};

export function columnLabel(column: string): string {
  return LABELS[column] ?? column.replace(/_ms$/, '').replace(/_/g, ' ');
}

/** The parts of the time: the partition of total_time_ms, then the details already counted in it. */
export function timeParts(columns: readonly ReportColumn[]): { parts: ReportColumn[]; details: ReportColumn[] } {
  const time = columns.filter((c) => c.unit === 'ns' && c.column !== TOTAL_COLUMN);
  return { parts: time.filter((c) => !c.alreadyCounted), details: time.filter((c) => c.alreadyCounted) };
}

/** One period of one statement, per call (or, when calls were not measured, per second of the period). */
export interface PeriodFigures {
  /** null: the `query` probe set was not attached, so there is no exact count. */
  calls: number | null;
  /** 'call' when calls are known and non-zero, else 'second'. */
  per: 'call' | 'second';
  /** Milliseconds per call (or per second) of each time column; null: not measured. */
  ms: Record<string, number | null>;
  ran: boolean;
}

export interface Growth {
  column: string;
  label: string;
  /** Change of ms per call (or per second). */
  deltaMs: number;
  /** For a detail (reclaim, ...): the part of the partition whose growth it explains. */
  within?: string;
}

export interface StatementComparison {
  statement: ReportStatement;
  window: PeriodFigures;
  baseline: PeriodFigures | null;
  /** Total time per call (or second): window / baseline; null without a baseline or one it did not run in. */
  ratio: number | null;
  /** The component that grew most, and the details that explain it; empty: no slower. */
  grew: Growth[];
}

function figures(sums: PeriodSums, range: TimeRange, columns: readonly ReportColumn[]): PeriodFigures {
  const calls = sums.calls ?? null;
  const per = calls !== null && calls > 0 ? 'call' : 'second';
  const divisor = per === 'call' ? calls! : (range.toMs - range.fromMs) / 1000;
  const ms = Object.fromEntries(
    columns
      .filter((c) => c.unit === 'ns')
      .map((c) => [c.column, sums[c.column] === null || sums[c.column] === undefined ? null : sums[c.column]! / divisor]),
  );
  return { calls, per, ms, ran: (sums[TOTAL_COLUMN] ?? 0) > 0 || (calls ?? 0) > 0 };
}

/**
 * A detail (reclaim, compaction, writeback throttling) is named as a cause when its own growth
 * is at least this share of the part that grew most, or DETAIL_OF_TOTAL of the whole growth:
 * reclaim that waits for writeback grows "other waits" while the writeback running beside the
 * statement can grow "on CPU" more, and either part named alone would hide why.
 */
const DETAIL_SHARE = 0.5;
const DETAIL_OF_TOTAL = 0.25;

/**
 * The part a detail's time counts in: it has no column of its own in the partition, and can
 * sit in either of two (reclaim scans on the CPU and sleeps waiting for writeback), so the part
 * that grew by the amount nearest its own growth.
 */
function partItCountsIn(detail: number, grown: Growth[]): string {
  return grown.reduce((best, p) => (Math.abs(p.deltaMs - detail) < Math.abs(best.deltaMs - detail) ? p : best)).label;
}

/**
 * Which part of the time grew: the part of total_time_ms whose ms per call grew most, with the
 * details that explain half of that growth, or a quarter of the whole, named first. Parts and
 * details come from the column list, so a new column is compared without a change here.
 */
export function whatGrew(window: PeriodFigures, baseline: PeriodFigures, columns: readonly ReportColumn[]): Growth[] {
  const { parts, details } = timeParts(columns);
  const delta = (c: ReportColumn) => (window.ms[c.column] ?? 0) - (baseline.ms[c.column] ?? 0);
  const total = (window.ms[TOTAL_COLUMN] ?? 0) - (baseline.ms[TOTAL_COLUMN] ?? 0);
  if (total <= 0) return [];
  const ranked: Growth[] = parts
    .map((c) => ({ column: c.column, label: columnLabel(c.column), deltaMs: delta(c) }))
    .sort((a, b) => b.deltaMs - a.deltaMs);
  const top = ranked[0];
  if (!top || top.deltaMs <= 0) return [];
  const grown = ranked.filter((p) => p.deltaMs > 0);
  const explaining = details
    .map((c) => ({ column: c.column, label: columnLabel(c.column), deltaMs: delta(c) }))
    .filter((g) => g.deltaMs > 0 && (g.deltaMs >= DETAIL_SHARE * top.deltaMs || g.deltaMs >= DETAIL_OF_TOTAL * total))
    .map((g) => ({ ...g, within: partItCountsIn(g.deltaMs, grown) }))
    .sort((a, b) => b.deltaMs - a.deltaMs);
  return [...explaining, top];
}

/** The parts of the time a wait event's sleeps are in (the others, on CPU and run queue, have none). */
const WAIT_PARTS = new Set(['io_wait_ms', 'lock_wait_ms', 'lwlock_wait_ms', 'other_wait_ms']);

/**
 * When the part that grew most is a wait, the wait event behind it: the event whose time per
 * call (or second) grew most, named beside it when it explains at least half of that part's growth
 * ("Lock:transactionid +250 ms/call (in lock)"). `divisors`: calls or seconds of each period.
 */
export function withWaitEvent(
  grew: Growth[],
  events: { window: Record<string, number>; baseline: Record<string, number> },
  divisors: { window: number; baseline: number },
): Growth[] {
  const top = grew.at(-1);
  if (!top || !WAIT_PARTS.has(top.column) || divisors.window <= 0 || divisors.baseline <= 0) return grew;
  const names = new Set([...Object.keys(events.window), ...Object.keys(events.baseline)]);
  const ranked = [...names]
    .map((name) => ({
      column: `wait_event:${name}`,
      label: name,
      deltaMs: (events.window[name] ?? 0) / divisors.window - (events.baseline[name] ?? 0) / divisors.baseline,
      within: top.label,
    }))
    .sort((a, b) => b.deltaMs - a.deltaMs);
  const event = ranked[0];
  if (!event || event.deltaMs <= 0 || event.deltaMs < DETAIL_SHARE * top.deltaMs) return grew;
  // After the details (reclaim says more than the event it slept under), before the part.
  return [...grew.slice(0, -1), event, top];
}

export function compareStatements(data: ReportData): StatementComparison[] {
  const { window, baseline } = data.windows;
  return data.statements.map((statement) => {
    const w = figures(statement.window, window, data.columns);
    const b = statement.baseline && baseline ? figures(statement.baseline, baseline, data.columns) : null;
    // Per call against per second would compare different things: both fall back to per second.
    const [wf, bf] =
      b && w.per !== b.per
        ? [perSecond(statement.window, window, data.columns), perSecond(statement.baseline!, baseline!, data.columns)]
        : [w, b];
    const bTotal = bf?.ran ? (bf.ms[TOTAL_COLUMN] ?? null) : null;
    const wTotal = wf.ms[TOTAL_COLUMN] ?? null;
    const divisor = (f: PeriodFigures, range: TimeRange) => (f.per === 'call' ? (f.calls ?? 0) : (range.toMs - range.fromMs) / 1000);
    return {
      statement,
      window: wf,
      baseline: bf,
      ratio: bTotal && wTotal !== null ? wTotal / bTotal : null,
      grew:
        bf?.ran && baseline
          ? withWaitEvent(whatGrew(wf, bf, data.columns), statement.waitEvents, {
              window: divisor(wf, window),
              baseline: divisor(bf, baseline),
            })
          : [],
    };
  });
}

function perSecond(sums: PeriodSums, range: TimeRange, columns: readonly ReportColumn[]): PeriodFigures {
  return figures({ ...sums, calls: null }, range, columns);
}

/** "lock +512 ms/call" or "reclaim +40 ms/call (in on CPU)". */
export function growthText(g: Growth, per: 'call' | 'second'): string {
  return `${g.label} +${formatMs(g.deltaMs)} ms/${per === 'call' ? 'call' : 's'}${g.within ? ` (in ${g.within})` : ''}`;
}

/** Milliseconds with three significant digits, no exponent. */
export function formatMs(ms: number): string {
  const a = Math.abs(ms);
  if (a === 0) return '0';
  if (a >= 100) return ms.toFixed(0);
  if (a >= 10) return ms.toFixed(1);
  if (a >= 1) return ms.toFixed(2);
  if (a >= 0.001) return ms.toFixed(3);
  return '<0.001';
}
