import { readFileSync, writeFileSync } from 'node:fs';
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
 * Writes dashboards/*.json from the TypeScript (`npm run dashboards`); with --check, writes
 * nothing and exits 1 naming each file that differs from what the TypeScript generates.
 */
function main(argv: string[]): number {
  const check = argv.includes('--check');
  let stale = 0;
  for (const file of Object.keys(DASHBOARDS) as Array<keyof typeof DASHBOARDS>) {
    const path = join(packageRoot(), 'dashboards', file);
    const json = dashboardJson(file);
    let committed = '';
    try {
      committed = readFileSync(path, 'utf8');
    } catch {
      // missing: stale
    }
    if (committed === json) continue;
    if (check) {
      console.error(`dashboards/${file} differs from src/dashboards/: run npm run dashboards`);
      stale++;
    } else {
      writeFileSync(path, json);
      console.error(`wrote dashboards/${file}`);
    }
  }
  return stale ? 1 : 0;
}

if (process.argv[1] && import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2));
