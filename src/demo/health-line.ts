import { hostname } from 'node:os';
import type { ReportContext } from './report-context.js';

/**
 * One line from bpf_stats.health for this collector: flushes, rows written, events dropped
 * because a map was full, how full the fullest map is.
 *
 * @example
 * await printHealthLine(context);
 */
export async function printHealthLine({ client, print }: ReportContext): Promise<void> {
  const { rows } = await client.query(
    `SELECT flushes, rows_written, dropped_events, round(map_fill_pct::numeric, 1)::float8 AS map_fill_pct, failed_flushes
       FROM bpf_stats.health WHERE host = $1 AND pid = $2`,
    [hostname(), process.pid],
  );
  print('');
  const h = rows[0];
  if (!h) {
    print(`Health (bpf_stats.health): no row for this collector (host ${hostname()}, pid ${process.pid})`);
    return;
  }
  print(
    `Health (bpf_stats.health): ${h.flushes} flushes, ${h.rows_written} rows written, ${h.dropped_events} dropped events, ` +
      `fullest map ${h.map_fill_pct}% full, ${h.failed_flushes} failed flushes`,
  );
}
