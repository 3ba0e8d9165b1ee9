import { hostname } from 'node:os';
import { formatTable } from './format-table.js';
import { shortenSql } from '../shorten.js';
import type { ReportContext } from './report-context.js';

/**
 * The LLC section: query_llc's figures where the llc set ran, else why it could not
 * (bpf_stats.capabilities) and a check that the view holds NULLs there, not zeros.
 *
 * @example
 * await printLlcReport(context);
 */
export async function printLlcReport({ client, print, attached }: ReportContext): Promise<void> {
  print('');
  if (!attached.includes('llc')) {
    const capability = await client.query(
      "SELECT available, reason FROM bpf_stats.capabilities WHERE host = $1 AND kind = 'probe set' AND probe = 'llc'",
      [hostname()],
    );
    const counts = await client.query('SELECT count(*)::int AS n, count(llc_references)::int AS measured FROM bpf_stats.query_llc');
    const reason = capability.rows[0]
      ? String(capability.rows[0].reason).replace(/^unsupported: /, '')
      : 'no row in bpf_stats.capabilities';
    const state = capability.rows[0]?.available ? 'not attached' : 'unsupported';
    print(
      `LLC (bpf_stats.query_llc, llc set): ${state} here: ${reason}; ` +
        `${counts.rows[0].n} queries, ${counts.rows[0].measured} with llc figures (NULL, not 0, where unmeasured)`,
    );
    return;
  }
  print('LLC (bpf_stats.query_llc, llc set: sampled cache-references / cache-misses):');
  const { rows } = await client.query(`
    SELECT ${shortenSql('query')} AS query, calls, llc_references, llc_misses, llc_miss_ratio
      FROM bpf_stats.query_llc
     WHERE query NOT ILIKE '%pg_stat_statements%' AND llc_references > 0
     ORDER BY llc_misses DESC NULLS LAST LIMIT 6`);
  if (rows.length === 0) print('  (no LLC samples)');
  else print(formatTable(rows, ['query', 'calls', 'llc_references', 'llc_misses', 'llc_miss_ratio']));
}
