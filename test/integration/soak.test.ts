import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/package-root.js';

/*
 * The soak bench (bench/soak.ts), short: 60 s of pgbench -C churn, idle_session_timeout, the
 * collector's connections terminated every 2 s, a role flooding distinct statements and NOTIFYs,
 * a backend crash and a postmaster kill. It checks calls against pg_stat_statements in each era,
 * RSS and CPU per flush, the tables' bounds and the collector's exits itself; this runs the
 * built bench as an operator would and requires its verdict.
 */
describe('soak (60 s)', () => {
  it('stays exact, bounded and up through everything hostile at once', () => {
    const result = spawnSync(process.execPath, [join(packageRoot(), 'dist/bench/soak.js'), '--seconds', '60'], {
      encoding: 'utf8',
      timeout: 300_000,
    });
    const output = `${result.stdout}\n${result.stderr}`;
    expect(output, output).toMatch(/^ok: calls exact in every era/m);
    expect(result.status, output).toBe(0);
  }, 330_000);
});
