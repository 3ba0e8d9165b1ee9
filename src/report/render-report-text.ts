import { terminalSafe } from '../top/terminal-text.js';
import { columnLabel, formatMs, growthText, timeParts, type StatementComparison } from './report-compare.js';
import type { LatencyPercentiles, ReportData } from './report-read.js';
import { iso } from './report-window.js';

/** Lines are this wide at most, the query text taking what the figures leave (at least 40 columns). */
const WIDTH = 160;

function cell(text: string, width: number, right = false): string {
  const cut = text.length > width ? `${text.slice(0, width - 1)}…` : text;
  return right ? cut.padStart(width) : cut.padEnd(width);
}

const count = (n: number | null) => (n === null ? '-' : String(Math.round(n)));
const ms = (n: number | null | undefined) => (n === null || n === undefined ? '-' : formatMs(n));

/**
 * The terminal report: a header with the periods, then one line per statement (the most time in
 * the window first) with calls and time per call in the baseline and the window, the factor,
 * what grew and the start of the text; then, per statement, each part's ms per call.
 */
export function renderReportText(data: ReportData, rows: StatementComparison[]): string[] {
  const { window, baseline } = data.windows;
  const lines = [
    `pg-bpf-stats report  window ${iso(window.fromMs)}..${iso(window.toMs)}` +
      (baseline ? `  baseline ${iso(baseline.fromMs)}..${iso(baseline.toMs)}` : ''),
    `${data.statementsInWindow} statements ran in the window; the ${rows.length} with the most time follow. Times in ms per call (per second where calls were not measured: attach --probes query).`,
    '',
  ];
  const head = baseline
    ? `${cell('QUERYID', 20)} ${cell('CALLS', 8, true)} ${cell('BASE', 8, true)} ${cell('MS/CALL', 9, true)} ${cell('BASE', 9, true)} ${cell('x', 6, true)}  ${cell('GREW MOST', 44)} QUERY`
    : `${cell('QUERYID', 20)} ${cell('CALLS', 8, true)} ${cell('MS/CALL', 9, true)} QUERY`;
  lines.push(head);
  for (const r of rows) {
    const per = r.window.per;
    const text = terminalSafe(r.statement.text ?? '(no text: pg_stat_statements not installed)');
    const msCall = `${ms(r.window.ms.total_time_ms)}${per === 'second' ? '/s' : ''}`;
    let line: string;
    if (baseline) {
      const grew = r.grew.length ? r.grew.map((g) => growthText(g, per)).join(', ') : r.baseline?.ran ? 'not slower' : 'new in the window';
      line = `${cell(r.statement.queryid, 20)} ${cell(count(r.window.calls), 8, true)} ${cell(count(r.baseline?.calls ?? null), 8, true)} ${cell(msCall, 9, true)} ${cell(ms(r.baseline?.ran ? r.baseline.ms.total_time_ms : null), 9, true)} ${cell(r.ratio === null ? '-' : r.ratio.toFixed(2), 6, true)}  ${cell(grew, 44)} `;
    } else {
      line = `${cell(r.statement.queryid, 20)} ${cell(count(r.window.calls), 8, true)} ${cell(msCall, 9, true)} `;
    }
    lines.push(line + cell(text, Math.max(40, WIDTH - line.length)).trimEnd());
  }
  // The breakdown: each part of the time, window against baseline.
  const { parts, details } = timeParts(data.columns);
  // Parts that are zero or unmeasured in every listed statement would only widen the table.
  const shown = [...parts, ...details].filter((c) =>
    rows.some((r) => (r.window.ms[c.column] ?? 0) !== 0 || (r.baseline?.ms[c.column] ?? 0) !== 0),
  );
  lines.push('', `Where the time went (ms per call; baseline → window)`);
  lines.push(`${cell('QUERYID', 20)} ${shown.map((c) => cell(columnLabel(c.column), 16, true)).join(' ')}`);
  for (const r of rows) {
    const parts = shown.map((c) => {
      const w = ms(r.window.ms[c.column]);
      return cell(baseline ? `${r.baseline?.ran ? ms(r.baseline.ms[c.column]) : '-'}→${w}` : w, 16, true);
    });
    lines.push(`${cell(r.statement.queryid, 20)} ${parts.join(' ')}`);
  }
  // Latency percentiles, where the statements have histogram history (probe set latency).
  const pct = (p: LatencyPercentiles | null) => (p ? `${ms(p.p50Ms)}/${ms(p.p95Ms)}/${ms(p.p99Ms)}` : '-');
  const timed = rows.filter((r) => r.statement.latency.window || r.statement.latency.baseline);
  lines.push('', `Statement latency (ms, p50/p95/p99${baseline ? '; baseline → window' : ''})`);
  if (!timed.length)
    lines.push(
      data.latencyHistory
        ? 'none: no statement listed has latency histograms in these periods (attach --probes latency)'
        : 'none: this bpf_stats has no query_histogram_history (a schema before migration 1764720000000)',
    );
  for (const r of timed) {
    const { window: w, baseline: b } = r.statement.latency;
    lines.push(`${cell(r.statement.queryid, 20)} ${baseline ? `${pct(b)} → ${pct(w)}` : pct(w)}`);
  }
  lines.push(
    '',
    `Query text: ${data.textSource}. Details (${details.map((c) => columnLabel(c.column)).join(', ')}) are already counted in the parts.`,
  );
  return lines;
}
