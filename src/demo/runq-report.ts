import { formatTable } from './format-table.js';
import { shortenSql } from '../shorten.js';
import type { ReportContext } from './report-context.js';

/**
 * The run-queue section: each query's waits for a CPU (sched set) next to what the kernel's
 * own /proc/<pid>/schedstat says the CPU-bound backend waited.
 *
 * @example
 * await printRunqReport(context);
 */
export async function printRunqReport({ client, print, facts, attached, unsupported }: ReportContext): Promise<void> {
  print('');
  print('Run-queue latency (bpf_stats.query_runq_latency, sched set: each wait for a CPU; ms):');
  if (!attached.includes('sched')) {
    print(`  not collected: sched set not attached${unsupported.sched ? ` (${unsupported.sched})` : ''}`);
    return;
  }
  if (facts.cpu) {
    const { pid, onCpuMs, runDelayMs, slices } = facts.cpu;
    print(
      `CPU-bound backend ${pid}, /proc/${pid}/schedstat over the workload: on CPU ${onCpuMs.toFixed(1)} ms, ` +
        `run queue ${runDelayMs.toFixed(1)} ms over ${slices} slices`,
    );
  }
  const { rows } = await client.query(`
    SELECT ${shortenSql('r.query')} AS query, r.waits, r.p50_ms, r.p95_ms, r.max_ms, q.runq_wait_ms
      FROM bpf_stats.query_runq_latency r
      JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
     WHERE r.query NOT ILIKE '%pg_stat_statements%'
     ORDER BY q.runq_wait_ms DESC NULLS LAST LIMIT 8`);
  print(formatTable(rows, ['query', 'waits', 'p50_ms', 'p95_ms', 'max_ms', 'runq_wait_ms']));
}
