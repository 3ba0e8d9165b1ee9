import { shortenSql } from '../shorten.js';
import { formatTable } from './format-table.js';
import { printHealthLine } from './health-line.js';
import { printIoReport } from './io-report.js';
import { printLatencyReport } from './latency-report.js';
import { printLlcReport } from './llc-report.js';
import { printLocksReport } from './locks-report.js';
import { printMemoryReport } from './memory-report.js';
import type { ReportContext } from './report-context.js';
import { printRunqReport } from './runq-report.js';

/**
 * The demo's report: where each query's time went, per backend type, then one section per
 * metric family, each next to the ground truth the workload observed, and a health line.
 *
 * @example
 * await printReport({ client, print: console.log, facts, attached: sidecar.attached(), unsupported: {} });
 */
export async function printReport(context: ReportContext): Promise<void> {
  const { client, print } = context;
  const queries = await client.query(`
    SELECT ${shortenSql('t.query', 60)} AS query,
           s.calls AS pgss_calls, t.calls,
           round(s.total_exec_time::numeric, 1)::float8 AS pgss_exec_ms,
           t.total_time_ms, t.on_cpu_ms, t.runq_wait_ms, t.io_wait_ms, t.lock_wait_ms,
           t.lwlock_wait_ms, t.other_wait_ms
      FROM bpf_stats.query_time t
      JOIN public.pg_stat_statements s USING (userid, dbid, toplevel, queryid)
     WHERE t.query NOT ILIKE '%pg_stat_statements%'
     ORDER BY t.total_time_ms DESC LIMIT 10`);
  print('Where each query spent its time (bpf_stats.query_time joined with pg_stat_statements, ms):');
  print(
    "(calls come from the opt-in 'query' probe set; pg_stat_statements also counts the collector's own BEGIN/COMMIT, which bpf_stats leaves out)",
  );
  print(
    formatTable(queries.rows, [
      'query',
      'pgss_calls',
      'calls',
      'pgss_exec_ms',
      'total_time_ms',
      'on_cpu_ms',
      'runq_wait_ms',
      'io_wait_ms',
      'lock_wait_ms',
      'lwlock_wait_ms',
      'other_wait_ms',
    ]),
  );
  const backends = await client.query(`
    SELECT backend_type, count(*)::int AS processes, sum(on_cpu_ms) AS on_cpu_ms, sum(runq_wait_ms) AS runq_wait_ms,
           sum(io_wait_ms) AS io_wait_ms, sum(nvcsw)::bigint AS nvcsw, sum(nivcsw)::bigint AS nivcsw,
           sum(cpu_migrations)::bigint AS cpu_migrations, sum(minflt)::bigint AS minflt
      FROM bpf_stats.backend_stats GROUP BY backend_type ORDER BY on_cpu_ms DESC`);
  print('');
  print('Per backend type (bpf_stats.backend_stats):');
  print(
    formatTable(backends.rows, [
      'backend_type',
      'processes',
      'on_cpu_ms',
      'runq_wait_ms',
      'io_wait_ms',
      'nvcsw',
      'nivcsw',
      'cpu_migrations',
      'minflt',
    ]),
  );
  await printLatencyReport(client, print);
  await printRunqReport(context);
  await printIoReport(context);
  await printMemoryReport(context);
  await printLocksReport(context);
  await printLlcReport(context);
  await printHealthLine(context);
}
