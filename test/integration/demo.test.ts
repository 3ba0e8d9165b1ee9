import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/package-root.js';

const run = promisify(execFile);

describe('pg-bpf-stats demo', () => {
  it('runs the embedded default end to end, reports every family it provokes, and cleans up', async () => {
    const clustersBefore = readdirSync(tmpdir()).filter((d) => d.startsWith('pg-bpf-stats-'));
    const { stdout } = await run(process.execPath, [join(packageRoot(), 'dist/src/cli/main.js'), 'demo', '--duration', '6s'], {
      timeout: 120_000,
    });
    expect(stdout).toMatch(/\[5\/5\] report/);
    const row = (pattern: RegExp) => {
      const line = stdout.split('\n').find((l) => pattern.test(l));
      expect(line, `report row ${pattern}`).toBeDefined();
      return line!.trim().split(/\s{2,}/);
    };
    // columns: query, pgss_calls, calls, pgss_exec_ms, total, on_cpu, runq, io, lock, lwlock, other
    const cpu = row(/^SELECT count\(\*\) FROM generate_series/);
    // A CPU-bound statement never sleeps: its execution time is on a CPU or waiting for one.
    expect((Number(cpu[5]) + Number(cpu[6])) / Number(cpu[3])).toBeGreaterThan(0.8);
    const sleep = row(/^SELECT pg_sleep/);
    expect(Number(sleep[10]) / Number(sleep[4])).toBeGreaterThan(0.95);
    const lock = row(/^UPDATE demo_accounts/);
    expect(Number(lock[8]) / Number(lock[4])).toBeGreaterThan(0.9);
    const point = row(/^SELECT balance FROM demo_accounts WHERE id = \$1\s/);
    expect(point[1]).toBe(point[2]); // calls: ours equal pg_stat_statements'
    expect(stdout).toMatch(/^client backend\s/m);
    // Statement latency: the sleeps' exact max next to pg_stat_statements' max_exec_time.
    const latency = stdout.slice(stdout.indexOf('Statement latency'));
    const sleepLatency = latency.split('\n').find((l) => /^SELECT pg_sleep/.test(l))?.trim().split(/\s{2,}/);
    expect(sleepLatency, 'pg_sleep in the latency report').toBeDefined();
    // columns: query, observations, p50, p95, p99, max, pgss_mean, pgss_max
    expect(Number(sleepLatency![5])).toBeGreaterThanOrEqual(Number(sleepLatency![7]) - 0.1);
    expect(Number(sleepLatency![5])).toBeLessThan(Number(sleepLatency![7]) + 15);
    const clustersAfter = readdirSync(tmpdir()).filter((d) => d.startsWith('pg-bpf-stats-'));
    expect(clustersAfter.filter((d) => !clustersBefore.includes(d) && existsSync(join(tmpdir(), d)))).toEqual([]);
  });
});
