import pg from 'pg';
import { oneLine, UserError } from '../errors.js';
import { replaceFile } from '../replace-file.js';
import { clientConfig } from '../storage/connection-string.js';
import { assertPinned, pinnedConfig } from '../storage/pinned-session.js';
import { compareStatements } from './report-compare.js';
import { readReport } from './report-read.js';
import { renderReportHtml } from './render-report-html.js';
import { renderReportText } from './render-report-text.js';
import { parseReportWindows, type WindowOptions } from './report-window.js';

export interface ReportOptions extends WindowOptions {
  /** Statements shown (the most time in the window first). */
  limit: number;
  /** Write the HTML report here instead of the terminal table. */
  html?: string;
}

/** The statements shown unless --limit says otherwise. */
export const DEFAULT_REPORT_LIMIT = 20;

/**
 * `pg-bpf-stats report`: a window of bpf_stats history against an optional baseline, as a
 * terminal table or one HTML file. It reads bpf_stats alone (no BPF, no root), so it runs
 * wherever the collector writes, as any role that can read bpf_stats.
 */
export async function reportCommand(
  dsn: string | undefined,
  options: ReportOptions,
  out: (line: string) => void,
  nowMs = Date.now(),
): Promise<number> {
  // Times first: a typo fails before any connection.
  const windows = parseReportWindows(options, nowMs);
  const client = new pg.Client(pinnedConfig({ ...clientConfig(dsn), application_name: 'pg-bpf-stats report' }));
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    throw new UserError(`cannot connect: ${oneLine(error)}`);
  }
  try {
    await assertPinned(client);
    let data;
    try {
      data = await readReport(client, windows, options.limit);
    } catch (error) {
      if (error instanceof UserError) throw error;
      throw new UserError(`reading bpf_stats history failed: ${oneLine(error)}`);
    }
    const rows = compareStatements(data);
    if (options.html !== undefined) {
      // Not writeFileSync: it follows a link another user planted at the name (and truncates its target).
      replaceFile(options.html, renderReportHtml(data, rows, Date.now()), '--html');
      out(`wrote ${options.html}: ${rows.length} statements`);
    } else {
      for (const line of renderReportText(data, rows)) out(line);
    }
    return 0;
  } finally {
    await client.end().catch(() => undefined);
  }
}
