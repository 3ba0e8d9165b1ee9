import { columnLabel, formatMs, growthText, timeParts, type StatementComparison } from './report-compare.js';
import { TOTAL_COLUMN, type LatencyPercentiles, type ReportBucket, type ReportColumn, type ReportData } from './report-read.js';
import { iso } from './report-window.js';

/*
 * One self-contained HTML file: inline CSS and inline SVG drawn here, no script, no font, no
 * image, nothing fetched when it is opened, so it can be attached to a ticket and read offline.
 * Every text from the database is escaped.
 */

const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** About `count` round tick values from 0 to at least `max`. */
function ticks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw)!;
  const out: number[] = [];
  for (let v = 0; v < max + step * 0.999; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** A tick label: round numbers without trailing zeros (0.2, 1, 2.5, 250). */
const tickText = (v: number) => String(Number(v.toPrecision(6)));

const colorOf = (parts: readonly ReportColumn[]) => new Map(parts.map((c, i) => [c.column, PALETTE[i % PALETTE.length]!]));

function legend(parts: readonly ReportColumn[], colors: Map<string, string>): string {
  return `<div class="legend">${parts.map((c) => `<span><i style="background:${colors.get(c.column)}"></i>${escapeHtml(columnLabel(c.column))}</span>`).join('')}</div>`;
}

/**
 * Two stacked bars, baseline and window, of one statement's time per call split into the
 * parts of total_time_ms, on an axis in ms per call (or per second).
 */
function statementChart(r: StatementComparison, parts: readonly ReportColumn[], colors: Map<string, string>, hasBaseline: boolean): string {
  const unit = r.window.per === 'call' ? 'ms per call' : 'ms per second';
  const bars = [...(hasBaseline ? [{ name: 'baseline', f: r.baseline }] : []), { name: 'window', f: r.window }];
  const max = Math.max(
    ...bars.map((b) => (b.f?.ran ? (b.f.ms[TOTAL_COLUMN] ?? 0) : 0)),
    ...bars.map((b) => parts.reduce((s, c) => s + (b.f?.ms[c.column] ?? 0), 0)),
  );
  const scaleTicks = ticks(max);
  const top = scaleTicks[scaleTicks.length - 1]!;
  const left = 70;
  const width = 560;
  const plot = width - left - 20;
  const barH = 22;
  const height = 20 + bars.length * (barH + 10) + 40;
  const x = (v: number) => left + (v / top) * plot;
  let svg = `<svg class="chart statement-chart" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="time per call of query ${escapeHtml(r.statement.queryid)}">`;
  const axisY = 20 + bars.length * (barH + 10);
  for (const t of scaleTicks) {
    svg += `<line x1="${x(t)}" y1="14" x2="${x(t)}" y2="${axisY}" stroke="#ddd"/><text x="${x(t)}" y="${axisY + 14}" text-anchor="middle" class="tick">${tickText(t)}</text>`;
  }
  bars.forEach((b, i) => {
    const y = 20 + i * (barH + 10);
    svg += `<text x="${left - 6}" y="${y + barH / 2 + 4}" text-anchor="end" class="tick">${b.name}</text>`;
    if (!b.f?.ran) {
      svg += `<text x="${left + 4}" y="${y + barH / 2 + 4}" class="tick">did not run</text>`;
      return;
    }
    let at = 0;
    for (const c of parts) {
      const v = b.f.ms[c.column] ?? 0;
      if (v > 0)
        svg += `<rect x="${x(at)}" y="${y}" width="${Math.max(0.5, x(at + v) - x(at))}" height="${barH}" fill="${colors.get(c.column)}"><title>${escapeHtml(`${b.name}: ${columnLabel(c.column)} ${formatMs(v)} ${unit}`)}</title></rect>`;
      at += v;
    }
  });
  svg += `<line x1="${left}" y1="${axisY}" x2="${left + plot}" y2="${axisY}" stroke="#333"/>`;
  svg += `<text x="${left + plot / 2}" y="${axisY + 32}" text-anchor="middle" class="axis">${unit}</text></svg>`;
  return svg;
}

/**
 * Statement time of all statements over a period, stacked by part, in ms of statement time per
 * second of wall time (1000 = one backend busy the whole time), on the same y scale for both periods.
 */
function timelineChart(
  name: string,
  buckets: ReportBucket[],
  periodMs: number,
  bucketMs: number,
  yTop: number,
  parts: readonly ReportColumn[],
  colors: Map<string, string>,
): string {
  const width = 460;
  const height = 230;
  const left = 60;
  const bottom = 50;
  const plotW = width - left - 15;
  const plotH = height - bottom - 20;
  const minutes = periodMs / 60_000;
  const xUnit =
    minutes >= 180 ? { div: 3_600_000, name: 'hours' } : minutes >= 3 ? { div: 60_000, name: 'minutes' } : { div: 1000, name: 'seconds' };
  const x = (ms: number) => left + (ms / periodMs) * plotW;
  const y = (v: number) => 20 + plotH - (v / yTop) * plotH;
  let svg = `<svg class="chart timeline-chart" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${name} statement time">`;
  svg += `<text x="${left}" y="12" class="title">${name}</text>`;
  for (const t of ticks(yTop, 4)) {
    if (t > yTop) break;
    svg += `<line x1="${left}" y1="${y(t)}" x2="${left + plotW}" y2="${y(t)}" stroke="#e4e4e4"/><text x="${left - 5}" y="${y(t) + 4}" text-anchor="end" class="tick">${tickText(t)}</text>`;
  }
  for (const t of ticks(periodMs / xUnit.div, 5)) {
    if (t * xUnit.div > periodMs) break;
    svg += `<text x="${x(t * xUnit.div)}" y="${20 + plotH + 15}" text-anchor="middle" class="tick">${tickText(t)}</text>`;
  }
  for (const b of buckets) {
    // A bucket is drawn inside the plot even where the period ends within it.
    const start = Math.min(b.offsetMs, periodMs);
    const barW = Math.max(1, x(Math.min(b.offsetMs + bucketMs, periodMs)) - x(start) - 1);
    let at = 0;
    for (const c of parts) {
      const rate = (b.sums[c.column] ?? 0) / (bucketMs / 1000);
      if (rate > 0)
        svg += `<rect x="${x(start)}" y="${y(at + rate)}" width="${barW}" height="${y(at) - y(at + rate)}" fill="${colors.get(c.column)}"><title>${escapeHtml(`${columnLabel(c.column)} ${formatMs(rate)} ms/s`)}</title></rect>`;
      at += rate;
    }
  }
  svg += `<line x1="${left}" y1="${20 + plotH}" x2="${left + plotW}" y2="${20 + plotH}" stroke="#333"/><line x1="${left}" y1="20" x2="${left}" y2="${20 + plotH}" stroke="#333"/>`;
  svg += `<text x="${left + plotW / 2}" y="${height - 8}" text-anchor="middle" class="axis">${xUnit.name} from the start of the ${name}</text>`;
  svg += `<text transform="translate(14 ${20 + plotH / 2}) rotate(-90)" text-anchor="middle" class="axis">ms of statement time per s</text></svg>`;
  return svg;
}

/** A statement's latency percentiles per period (ms), from its histogram history; empty when it has none in either. */
function latencyTable(r: StatementComparison, hasBaseline: boolean): string {
  const { window, baseline } = r.statement.latency;
  if (!window && !baseline) return '';
  const row = (name: string, p: LatencyPercentiles | null) =>
    `<tr><th>${name}</th>${
      p
        ? `<td class="num">${p.observations}</td><td class="num">${formatMs(p.p50Ms)}</td><td class="num">${formatMs(p.p95Ms)}</td><td class="num">${formatMs(p.p99Ms)}</td>`
        : '<td class="num">0</td><td class="num">-</td><td class="num">-</td><td class="num">-</td>'
    }</tr>`;
  return `<table class="latency"><tr><th>latency</th><th>statements timed</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th></tr>
${hasBaseline ? row('baseline', baseline) : ''}${row('window', window)}</table>`;
}

export function renderReportHtml(data: ReportData, rows: StatementComparison[], generatedAtMs: number): string {
  const { window, baseline } = data.windows;
  const { parts, details } = timeParts(data.columns);
  const colors = colorOf([...parts, ...details]);
  const span = (r: { fromMs: number; toMs: number }) => `${iso(r.fromMs)} … ${iso(r.toMs)}`;
  const bucketRate = (b: ReportBucket) => parts.reduce((s, c) => s + (b.sums[c.column] ?? 0), 0) / (data.bucketMs / 1000);
  const yTop = ticks(Math.max(1, ...data.buckets.map(bucketRate)), 4).at(-1)!;
  const timelines = [
    ...(baseline
      ? [
          timelineChart(
            'baseline',
            data.buckets.filter((b) => b.period === 'baseline'),
            baseline.toMs - baseline.fromMs,
            data.bucketMs,
            yTop,
            parts,
            colors,
          ),
        ]
      : []),
    timelineChart(
      'window',
      data.buckets.filter((b) => b.period === 'window'),
      window.toMs - window.fromMs,
      data.bucketMs,
      yTop,
      parts,
      colors,
    ),
  ];
  const partCells = (f: StatementComparison['window'] | null) =>
    [...parts, ...details]
      .map(
        (c) =>
          `<td class="num">${f?.ran && f.ms[c.column] !== null && f.ms[c.column] !== undefined ? formatMs(f.ms[c.column]!) : '-'}</td>`,
      )
      .join('');
  const statementBlocks = rows
    .map((r) => {
      const per = r.window.per;
      const grew = r.grew.length
        ? r.grew.map((g) => growthText(g, per)).join(', ')
        : baseline
          ? r.baseline?.ran
            ? 'not slower'
            : 'new in the window'
          : '';
      const key = `userid ${r.statement.userid}, dbid ${r.statement.dbid}, ${r.statement.toplevel ? 'top level' : 'nested'}${data.nodes.length > 1 ? `, node ${r.statement.node}` : ''}`;
      return `<section class="statement">
<h3><span class="qid">queryid ${escapeHtml(r.statement.queryid)}</span> <span class="key">${escapeHtml(key)}</span>${grew ? ` <span class="grew">${escapeHtml(baseline && r.grew.length ? `${r.ratio === null ? '' : `${r.ratio.toFixed(2)}× slower; grew most: `}${grew}` : grew)}</span>` : ''}</h3>
<pre class="sql">${escapeHtml(r.statement.text ?? '(no text: pg_stat_statements is not installed)')}</pre>
<div class="row">${statementChart(r, parts, colors, baseline !== null)}
<table><tr><th></th><th>calls</th><th>ms/${per}</th>${[...parts, ...details].map((c) => `<th>${escapeHtml(columnLabel(c.column))}</th>`).join('')}</tr>
${baseline ? `<tr><th>baseline</th><td class="num">${r.baseline?.calls ?? '-'}</td><td class="num">${r.baseline?.ran ? formatMs(r.baseline.ms[TOTAL_COLUMN] ?? 0) : '-'}</td>${partCells(r.baseline)}</tr>` : ''}
<tr><th>window</th><td class="num">${r.window.calls ?? '-'}</td><td class="num">${formatMs(r.window.ms[TOTAL_COLUMN] ?? 0)}</td>${partCells(r.window)}</tr></table>
${latencyTable(r, baseline !== null)}</div>
</section>`;
    })
    .join('\n');
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>pg-bpf-stats report ${escapeHtml(span(window))}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px} h3{font-size:14px;margin:0 0 6px;font-weight:normal}
.meta{color:#555} .qid{font-family:monospace;font-weight:bold} .key{color:#666} .grew{color:#b00020;font-weight:bold}
.statement{border-top:1px solid #ddd;padding:12px 0}
pre.sql{background:#f6f6f6;padding:6px 8px;margin:4px 0 8px;white-space:pre-wrap;word-break:break-word;max-height:8em;overflow:auto;font-size:12px}
.row{display:flex;gap:16px;align-items:flex-start;flex-wrap:wrap}
table{border-collapse:collapse;font-size:12px} td,th{padding:2px 6px;border-bottom:1px solid #eee;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.legend span{margin-right:14px;white-space:nowrap} .legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg .tick{font-size:11px;fill:#444} svg .axis{font-size:12px;fill:#222} svg .title{font-size:13px;font-weight:bold;fill:#222}
</style></head><body>
<h1>pg-bpf-stats report</h1>
<p class="meta">Window <b>${escapeHtml(span(window))}</b>${baseline ? `, baseline <b>${escapeHtml(span(baseline))}</b>` : ''} (UTC). ${data.statementsInWindow} statements ran in the window; the ${rows.length} with the most time are shown.
Generated ${escapeHtml(iso(generatedAtMs))} from bpf_stats.query_stats_history${data.nodes.length ? ` (node${data.nodes.length > 1 ? 's' : ''} ${escapeHtml(data.nodes.join(', '))})` : ''}; query text from ${escapeHtml(data.textSource)}.
Latency percentiles (p50, p95, p99, within 10% from 16 µs on) come from bpf_stats.query_histogram_history (probe set latency)${data.latencyHistory ? '' : ': not in this database (a schema before migration 1764720000000)'}.
Times are milliseconds per call${rows.some((r) => r.window.per === 'second') ? ' (per second of the period where calls were not measured)' : ''}; ${escapeHtml(details.map((c) => columnLabel(c.column)).join(', '))} are details already counted in the other parts.</p>
${legend(parts, colors)}
<h2>Statement time over the period, all statements</h2>
<div class="row">${timelines.join('\n')}</div>
<h2>Statements</h2>
${statementBlocks}
</body></html>
`;
}
