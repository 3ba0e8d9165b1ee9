import type pg from 'pg';
import { shortenSql } from '../shorten.js';
import { formatTable } from './format-table.js';

/**
 * The demo's statement latency section: bpf_stats.query_latency next to pg_stat_statements'
 * own mean and max execution time.
 *
 * @example
 * await printLatencyReport(client, console.log);
 */
export async function printLatencyReport(client: pg.Client, print: (line: string) => void): Promise<void> {
  const { rows } = await client.query(`
    SELECT ${shortenSql('l.query', 60)} AS query, l.observations,
           l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms,
           round(s.mean_exec_time::numeric, 1)::float8 AS pgss_mean_ms, round(s.max_exec_time::numeric, 1)::float8 AS pgss_max_ms
      FROM bpf_stats.query_latency l
      JOIN public.pg_stat_statements s USING (userid, dbid, toplevel, queryid)
     WHERE l.query NOT ILIKE '%pg_stat_statements%'
     ORDER BY l.p99_ms DESC NULLS LAST LIMIT 8`);
  print('');
  print('Statement latency (bpf_stats.query_latency: log2 buckets, p* within a factor of 2, max exact; ms):');
  print(formatTable(rows, ['query', 'observations', 'p50_ms', 'p95_ms', 'p99_ms', 'max_ms', 'pgss_mean_ms', 'pgss_max_ms']));
}
