import { formatTable } from './format-table.js';
import { shortenSql } from '../shorten.js';
import type { ReportContext } from './report-context.js';

/**
 * The memory section: the queries that stalled in reclaim or compaction (memory set), next to
 * the memory cgroup's own counters for the demo's constrained scan.
 *
 * @example
 * await printMemoryReport(context);
 */
export async function printMemoryReport({ client, print, facts, attached, unsupported }: ReportContext): Promise<void> {
  print('');
  print('Memory (bpf_stats.query_memory, memory set: reclaim/compaction stalls, part of the time above, not extra; ms):');
  if (!attached.includes('memory')) {
    print(`  not collected: memory set not attached${unsupported.memory ? ` (${unsupported.memory})` : ''}`);
    return;
  }
  const { memory } = facts;
  if (memory && 'skipped' in memory) print(`memory cgroup step skipped: ${memory.skipped}`);
  else if (memory) {
    print(
      `memory cgroup of backend ${memory.pid} (memory.limit_in_bytes ${memory.limitBytes / 2 ** 20} MB): "${memory.query}" ` +
        `hit the limit ${memory.limitHits} times, cgroup grew ${(memory.grownBytes / 2 ** 20).toFixed(1)} MB: ~${memory.expectedPages} pages to reclaim`,
    );
  }
  const { rows } = await client.query(`
    SELECT ${shortenSql('m.query')} AS query, m.calls, m.reclaim_ms, m.reclaim_pages,
           m.compaction_stall_ms AS compaction_ms, m.majflt, m.total_time_ms
      FROM bpf_stats.query_memory m
     WHERE m.query NOT ILIKE '%pg_stat_statements%'
       AND (m.reclaim_ms > 0 OR m.reclaim_pages > 0 OR m.compaction_stall_ms > 0)
     ORDER BY m.reclaim_ms + coalesce(m.compaction_stall_ms, 0) DESC LIMIT 6`);
  if (rows.length === 0) print('  (no query stalled in reclaim or compaction)');
  else print(formatTable(rows, ['query', 'calls', 'reclaim_ms', 'reclaim_pages', 'compaction_ms', 'majflt', 'total_time_ms']));
}
