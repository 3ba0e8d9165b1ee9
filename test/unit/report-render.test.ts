import { describe, expect, it } from 'vitest';
import { parseCli } from '../../src/cli/parse-args.js';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { compareStatements } from '../../src/report/report-compare.js';
import type { PeriodSums, ReportData } from '../../src/report/report-read.js';
import { renderReportHtml } from '../../src/report/render-report-html.js';
import { renderReportText } from '../../src/report/render-report-text.js';

const columns = METRIC_COLUMNS.map((c) => ({
  column: c.column,
  unit: c.unit,
  alreadyCounted: 'alreadyCounted' in c && c.alreadyCounted === true,
  description: c.description,
}));
const sums = (values: Record<string, number>): PeriodSums => Object.fromEntries(columns.map((c) => [c.column, values[c.column] ?? 0]));
const HOSTILE = `SELECT '</pre><script>alert(1)</script><img src=x onerror=alert(2)>' /* \x1b]0;pwned\x07 */`;

function data(): ReportData {
  return {
    windows: {
      window: { fromMs: Date.UTC(2026, 10, 24, 9), toMs: Date.UTC(2026, 10, 24, 10) },
      baseline: { fromMs: Date.UTC(2026, 10, 17, 9), toMs: Date.UTC(2026, 10, 17, 10) },
    },
    columns,
    totals: { window: sums({}), baseline: sums({}) },
    statementsInWindow: 1,
    statements: [
      {
        node: 'db1:5432',
        userid: 10,
        dbid: 5,
        toplevel: true,
        queryid: '-42',
        text: HOSTILE,
        window: sums({ calls: 10, total_time_ms: 3000, on_cpu_ms: 500, lock_wait_ms: 2500 }),
        baseline: sums({ calls: 10, total_time_ms: 500, on_cpu_ms: 500 }),
        latency: { window: { observations: 10, p50Ms: 12.5, p95Ms: 480, p99Ms: 512 }, baseline: null },
        waitEvents: { window: { 'Lock:transactionid': 2500 }, baseline: {} },
      },
    ],
    buckets: [{ offsetMs: 0, period: 'window', sums: sums({ on_cpu_ms: 500, lock_wait_ms: 2500 }) }],
    bucketMs: 60_000,
    nodes: ['db1:5432'],
    textSource: 'bpf_stats.query_texts',
    latencyHistory: true,
  };
}

describe('report rendering', () => {
  it('escapes statement text in the HTML: no markup of its own gets in', () => {
    const html = renderReportHtml(data(), compareStatements(data()), Date.UTC(2026, 10, 27));
    // The words may stay, as text: no tag opens.
    expect(html).not.toMatch(/<script|<img/i);
    expect(html).toContain('&#60;/pre&#62;&#60;script&#62;alert(1)&#60;/script&#62;');
    expect(html).toContain('lock +250 ms/call');
  });

  it('draws one timeline and one bar per statement without a baseline', () => {
    const alone = { ...data(), windows: { ...data().windows, baseline: null }, totals: { window: sums({}), baseline: null } };
    alone.statements = alone.statements.map((st) => ({ ...st, baseline: null }));
    const html = renderReportHtml(alone, compareStatements(alone), Date.UTC(2026, 10, 27));
    expect(html.match(/class="chart timeline-chart"/g)).toHaveLength(1);
    expect(html).not.toContain('>baseline</text>');
    expect(renderReportText(alone, compareStatements(alone)).find((l) => l.startsWith('-42 '))).toMatch(/^-42\s+10\s+300 /);
  });

  it('shows the latency percentiles of each period, and a period without histograms as such', () => {
    const lines = renderReportText(data(), compareStatements(data()));
    const heading = lines.indexOf('Statement latency (ms, p50/p95/p99; baseline → window)');
    expect(heading).toBeGreaterThan(0);
    expect(lines[heading + 1]).toMatch(/^-42\s+- → 12\.5\/480\/512$/);
    const html = renderReportHtml(data(), compareStatements(data()), Date.UTC(2026, 10, 27));
    expect(html).toMatch(
      /<tr><th>baseline<\/th><td class="num">0<\/td><td class="num">-<\/td>.*<tr><th>window<\/th><td class="num">10<\/td><td class="num">12\.5<\/td><td class="num">480<\/td><td class="num">512<\/td>/,
    );
    const untimed = data();
    untimed.statements = untimed.statements.map((st) => ({ ...st, latency: { window: null, baseline: null } }));
    expect(renderReportText(untimed, compareStatements(untimed))).toContain(
      'none: no statement listed has latency histograms in these periods (attach --probes latency)',
    );
    expect(renderReportHtml(untimed, compareStatements(untimed), 0)).not.toContain('class="latency"');
  });

  it('keeps escape sequences out of the terminal table', () => {
    const lines = renderReportText(data(), compareStatements(data()));
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what the test looks for
    expect(lines.join('\n')).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    expect(lines.find((l) => l.startsWith('-42 '))).toMatch(/Lock:transactionid \+250 ms\/call/);
  });

  it('takes report options only with report, and checks --limit', () => {
    const options = parseCli(['report', '--since', 'tuesday 09:00', '--baseline', '1 week', '--html', 'r.html', '--limit', '5']);
    expect(options).toMatchObject({ command: 'report', report: { since: 'tuesday 09:00', baseline: '1 week', html: 'r.html', limit: 5 } });
    expect(() => parseCli(['top', '--since', 'tuesday'])).toThrow(/--since is an option of report/);
    expect(() => parseCli(['run', '--html', 'x'])).toThrow(/--html is an option of report/);
    expect(() => parseCli(['report', '--limit', '0'])).toThrow(/--limit '0'/);
  });
});
