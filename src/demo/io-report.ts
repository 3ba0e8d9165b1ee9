import { formatTable } from './format-table.js';
import { shortenSql } from '../shorten.js';
import type { ReportContext } from './report-context.js';

/**
 * The block IO section: the queries that read or wrote most (io set), with their IO latency
 * histogram, next to pg_relation_size of the table the cold scan read.
 *
 * @example
 * await printIoReport(context);
 */
export async function printIoReport({ client, print, facts, attached, unsupported }: ReportContext): Promise<void> {
  print('');
  print('Block IO (bpf_stats.query_io, io set: block requests a backend created; MB = 2^20 bytes; IO latency per request in ms):');
  if (!attached.includes('io')) {
    print(`  not collected: io set not attached${unsupported.io ? ` (${unsupported.io})` : ''}`);
    return;
  }
  const { cold, io } = facts;
  if (io && 'skipped' in io) print(`cold scan skipped: ${io.skipped}`);
  else
    print(
      `pg_relation_size('${cold.name}') = ${cold.bytes} bytes (${(cold.bytes / 2 ** 20).toFixed(1)} MB), read cold once by "${io?.query}"`,
    );
  const { rows } = await client.query(`
    SELECT ${shortenSql('i.query')} AS query, i.calls, i.blk_read_ios AS read_ios,
           round(i.blk_read_bytes / 1048576.0, 1)::float8 AS read_mb,
           round(i.avg_read_bytes::numeric / 1024)::int AS avg_read_kb,
           bpf_stats.hist_quantile(h.counts, 0.5, h.max_ms) AS io_p50_ms,
           bpf_stats.hist_quantile(h.counts, 0.95, h.max_ms) AS io_p95_ms,
           round(i.blk_write_bytes / 1048576.0, 1)::float8 AS write_mb,
           i.io_wait_ms, i.writeback_throttle_ms AS throttle_ms
      FROM bpf_stats.query_io i
      LEFT JOIN bpf_stats.query_histograms h ON h.kind = 'io' AND (h.userid, h.dbid, h.toplevel, h.queryid) = (i.userid, i.dbid, i.toplevel, i.queryid)
     WHERE i.query NOT ILIKE '%pg_stat_statements%'
       AND (i.blk_read_ios > 0 OR i.blk_write_ios > 0 OR i.writeback_throttle_ms > 0)
     ORDER BY coalesce(i.blk_read_bytes, 0) + coalesce(i.blk_write_bytes, 0) DESC LIMIT 6`);
  if (rows.length === 0) print('  (no query created block IO)');
  else
    print(
      formatTable(rows, [
        'query',
        'calls',
        'read_ios',
        'read_mb',
        'avg_read_kb',
        'io_p50_ms',
        'io_p95_ms',
        'write_mb',
        'io_wait_ms',
        'throttle_ms',
      ]),
    );
}
