import { formatTable } from './format-table.js';
import { shortenSql } from '../shorten.js';
import type { ReportContext } from './report-context.js';

/**
 * The lock sections: heavyweight lock waits by lock type and mode (locks set) next to what
 * pg_locks showed the row-lock waiter waiting for, and LWLock waits by tranche (lwlock set)
 * next to the waits pg_stat_activity samples caught during the insert burst.
 *
 * @example
 * await printLocksReport(context);
 */
export async function printLocksReport({ client, print, facts, attached, unsupported }: ReportContext): Promise<void> {
  print('');
  print('Heavyweight lock waits (bpf_stats.query_lock_detail, locks set; ms):');
  if (!attached.includes('locks')) {
    print(`  not collected: locks set not attached${unsupported.locks ? ` (${unsupported.locks})` : ''}`);
  } else {
    if (facts.rowLock) print(`pg_locks showed the row-lock waiter waiting for: ${facts.rowLock.locktype} ${facts.rowLock.mode}`);
    const { rows } = await client.query(`
      SELECT ${shortenSql('query', 40)} AS query, locktype, mode, relation, waits, wait_time_ms AS wait_ms, mean_wait_ms AS mean_ms
        FROM bpf_stats.query_lock_detail
       ORDER BY wait_time_ms DESC LIMIT 6`);
    if (rows.length === 0) print('  (no heavyweight lock waits)');
    else print(formatTable(rows, ['query', 'locktype', 'mode', 'relation', 'waits', 'wait_ms', 'mean_ms']));
  }

  print('');
  print('LWLock waits (bpf_stats.query_lwlock_detail, lwlock set; ms):');
  if (!attached.includes('lwlock')) {
    print(`  not collected: lwlock set not attached${unsupported.lwlock ? ` (${unsupported.lwlock})` : ''}`);
    return;
  }
  if (facts.lwlock) {
    const seen = Object.entries(facts.lwlock.sampled)
      .sort((a, b) => b[1] - a[1])
      .map(([name, n]) => `${name} x${n}`)
      .join(', ');
    print(`pg_stat_activity samples during the insert burst (${facts.lwlock.statements} inserts): ${seen || 'no waits caught'}`);
  }
  const { rows } = await client.query(`
    SELECT ${shortenSql('query', 40)} AS query, tranche, mode, waits, wait_time_ms AS wait_ms, mean_wait_ms AS mean_ms
      FROM bpf_stats.query_lwlock_detail
     ORDER BY wait_time_ms DESC LIMIT 10`);
  if (rows.length === 0) print('  (no LWLock waits)');
  else print(formatTable(rows, ['query', 'tranche', 'mode', 'waits', 'wait_ms', 'mean_ms']));
}
