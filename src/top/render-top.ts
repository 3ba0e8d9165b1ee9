import type { TopMetric } from './top-read.js';
import type { TopRates, RateRow } from './top-rates.js';
import { terminalSafe } from './terminal-text.js';

/** What `top` sorts by, and the key that picks it. */
export const SORT_KEYS: Readonly<Record<string, TopMetric>> = {
  t: 'total',
  c: 'cpu',
  r: 'runq',
  i: 'io',
  l: 'lock',
  w: 'lwlock',
  m: 'reclaim',
  n: 'calls',
};

export interface TopScreen {
  /** Where the figures come from, e.g. postgres@db1:5432. */
  source: string;
  /** The wall clock of the refresh, HH:MM:SS. */
  clock: string;
  rates: TopRates | null;
  sort: TopMetric;
  /** Seconds since the last flush (null: none yet). */
  flushAgeSeconds: number | null;
  collectors: number;
  droppedEvents: number;
  lastError: string | null;
}

const COLUMNS: ReadonlyArray<{ metric: TopMetric; title: string }> = [
  { metric: 'total', title: 'time' },
  { metric: 'cpu', title: 'cpu' },
  { metric: 'runq', title: 'runq' },
  { metric: 'io', title: 'io' },
  { metric: 'lock', title: 'lock' },
  { metric: 'lwlock', title: 'lwlck' },
  { metric: 'reclaim', title: 'recl' },
];
const W = 5;
/** The TOP WAIT column: a statement's wait event with the most time, e.g. Lock:transactionid (longer ones are cut). */
const WAIT_W = 18;
/** The screen width from which the TOP WAIT column is shown (at 80 it would leave the text ten characters). */
const WAIT_MIN_WIDTH = 100;
/** pg_stat_activity's backend types, short enough for the TYPE column. */
const SHORT_TYPES: Readonly<Record<string, string>> = {
  'client backend': 'client',
  'autovacuum worker': 'autovacuum',
  'autovacuum launcher': 'av launcher',
  'background writer': 'bgwriter',
  'background worker': 'bgworker',
  'logical replication launcher': 'logical rep',
  'logical replication worker': 'logical rep',
  'parallel worker': 'parallel',
};

/**
 * The screen, as lines no wider than `width`, at most `height` of them: a header, the busiest
 * statements and the busiest live backends by the sort column, in milliseconds per second (1000
 * = one CPU's worth of time). Pure: the same rows give the same lines (tests compare them).
 *
 * @example
 * renderTop(screen, { width: 80, height: 24 }).join('\n');
 */
export function renderTop(screen: TopScreen, size: { width: number; height: number }): string[] {
  const width = Math.max(40, size.width);
  const height = Math.max(8, size.height);
  const sortTitle = screen.sort === 'calls' ? 'calls/s' : (COLUMNS.find((c) => c.metric === screen.sort)?.title ?? screen.sort);
  const age = screen.flushAgeSeconds === null ? 'no flush yet' : `flushed ${screen.flushAgeSeconds.toFixed(0)}s ago`;
  const lines: string[] = [
    `pg-bpf-stats top  ${screen.source}  ${screen.clock}  ${age}`,
    screen.lastError
      ? `collector error: ${screen.lastError}`
      : `ms/s (1000 = 1 CPU)  collectors ${screen.collectors}  dropped ${screen.droppedEvents}  sort ${sortTitle}`,
  ];
  const rows = height - 6;
  const queryRows = Math.ceil(rows / 2);
  const backendRows = rows - queryRows;

  lines.push('');
  const numbers = (r: RateRow) => COLUMNS.map((c) => pad(fmt(r.perSecond[c.metric]), W)).join(' ');
  const headings = COLUMNS.map((c) => pad(c.metric === screen.sort ? `${c.title}*` : c.title, W)).join(' ');
  // The top wait event only where the query text keeps room beside it.
  const wait = (s: string) => (width >= WAIT_MIN_WIDTH ? `${cut(terminalSafe(s), WAIT_W).padEnd(WAIT_W)} ` : '');
  lines.push(`${pad(screen.sort === 'calls' ? 'call/s*' : 'call/s', 7)} ${headings} ${wait('TOP WAIT')}QUERY`);
  const queries = sorted(screen.rates?.queries ?? [], screen.sort).slice(0, queryRows);
  for (const q of queries)
    lines.push(`${pad(fmt(q.perSecond.calls), 7)} ${numbers(q)} ${wait(q.row.waitEvent ?? '-')}${text(q.row.text, q.row.key)}`);
  if (!screen.rates) lines.push('  (waiting for two flushes to compute rates)');
  else if (!queries.length) lines.push('  (no statement ran since the last refresh)');

  lines.push('');
  lines.push(`${pad('PID', 7)} ${'TYPE'.padEnd(12)} ${headings} QUERY`);
  const sortBackends = screen.sort === 'calls' ? 'total' : screen.sort;
  const backends = sorted(screen.rates?.backends ?? [], sortBackends).slice(0, backendRows);
  for (const b of backends)
    lines.push(
      `${pad(String(b.row.pid), 7)} ${cut(SHORT_TYPES[b.row.backendType] ?? terminalSafe(b.row.backendType), 12).padEnd(12)} ${numbers(b)} ${text(b.row.text, '')}`,
    );
  if (screen.rates && !backends.length) lines.push('  (no backend worked since the last refresh)');

  // Keys last, where a person looks for them; the screen never scrolls. Every line is made safe
  // for the terminal before it is cut: texts, type names and errors come from other roles.
  const body = lines.slice(0, height - 1).map((l) => cut(terminalSafe(l), width));
  while (body.length < height - 1) body.push('');
  body.push(cut('keys: t time  c cpu  r runq  i io  l lock  w lwlock  m reclaim  n calls  q quit', width));
  return body;
}

/** Busiest first; rows where the sort figure is not measured go last; ties by key, so the order is stable. */
function sorted<Row extends RateRow>(rows: readonly Row[], by: TopMetric): Row[] {
  return rows
    .filter((r) => Object.values(r.perSecond).some((v) => v !== null && v > 0))
    .sort(
      (a, b) =>
        (b.perSecond[by] ?? -1) - (a.perSecond[by] ?? -1) ||
        (b.perSecond.total ?? 0) - (a.perSecond.total ?? 0) ||
        (a.row.key < b.row.key ? -1 : 1),
    );
}

/** A figure in at most 5 characters: 0, 0.25, 12.5, 1234, 12.3k, '-' when not measured. */
export function fmt(v: number | null): string {
  if (v === null) return '-';
  if (v === 0) return '0';
  if (v < 10) return v.toFixed(2);
  if (v < 100) return v.toFixed(1);
  if (v < 100_000) return v.toFixed(0).length <= W ? v.toFixed(0) : `${(v / 1000).toFixed(1)}k`;
  if (v < 1e8) return `${(v / 1e6).toFixed(v < 1e7 ? 1 : 0)}M`;
  return `${(v / 1e9).toFixed(0)}G`;
}

function pad(s: string, w: number): string {
  return s.padStart(w);
}

function cut(s: string, w: number): string {
  return s.length <= w ? s : `${s.slice(0, w - 1)}…`;
}

function text(query: string | null, key: string): string {
  return query === null ? (key ? `queryid ${key.split('/').pop()}` : '') : terminalSafe(query).replace(/\s+/g, ' ').trim();
}
