import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../package-root.js';
import { prometheusDashboard } from './prometheus-dashboard.js';
import { sqlDashboard } from './sql-dashboard.js';

/** The dashboards we ship, by file name under dashboards/. */
export const DASHBOARDS = {
  'pg-bpf-stats-postgresql.json': sqlDashboard,
  'pg-bpf-stats-prometheus.json': prometheusDashboard,
} as const;

/** The JSON of a dashboard as committed (two-space indent, final newline). */
export function dashboardJson(file: keyof typeof DASHBOARDS): string {
  return `${JSON.stringify(DASHBOARDS[file](), null, 2)}\n`;
}

/**
 * Writes dashboards/*.json from the TypeScript (`npm run dashboards`). test/unit/dashboards.test.ts
 * fails while a committed file differs from what this writes.
 */
function main(): void {
  for (const file of Object.keys(DASHBOARDS) as Array<keyof typeof DASHBOARDS>) {
    const path = join(packageRoot(), 'dashboards', file);
    const json = dashboardJson(file);
    if (existsSync(path) && readFileSync(path, 'utf8') === json) continue;
    writeFileSync(path, json);
    console.error(`wrote dashboards/${file}`);
  }
}

if (process.argv[1] && import.meta.url === `file://${process.argv[1]}`) main();
