import type pg from 'pg';
import { expect } from 'vitest';
import type { Sidecar } from '../../src/sidecar/sidecar.js';

/**
 * Flushes, then returns the one query_stats row whose pg_stat_statements text matches
 * `pattern` (LIKE), with pg_stat_statements' own calls and total_exec_time beside it: the
 * ground truth and the figure under test in one row.
 *
 * @example
 * const row = await statsFor(admin, sidecar, 'SELECT pg_sleep($1)');
 * expect(row.other_wait_ms).toBeGreaterThan(0.95 * row.total_exec_time);
 */
export async function statsFor(admin: pg.Client, sidecar: Sidecar, pattern: string) {
  await sidecar.flush();
  const { rows } = await admin.query(
    `SELECT s.calls AS pgss_calls, s.total_exec_time, q.*
       FROM pg_stat_statements s
       JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
      WHERE s.query LIKE $1`,
    [pattern],
  );
  expect(rows, `exactly one statement matches ${pattern}`).toHaveLength(1);
  return rows[0];
}
