import type pg from 'pg';

/** pg_stat_statements' text of a statement of statementOfTerms() (run-statements.ts): each constant a parameter. */
export const normalizedStatement = (sql: string) => sql.replace(/1/g, (_, at: number) => `$${sql.slice(0, at).split('1').length}`);

/**
 * Statements of `sqls` whose latency observations (query_histograms, kind query_latency: one
 * per execution, latency set) differ from pg_stat_statements' calls, as the row's total or as
 * the sum of its slots (each flush adds to both); a statement with no histogram row has them null.
 */
export async function latencyDisagreeing(
  admin: pg.Client,
  sqls: readonly string[],
): Promise<Array<{ query: string; calls: string; observations: string | null; slots: string | null }>> {
  const { rows } = await admin.query(
    `SELECT s.query, s.calls::text AS calls, h.observations::text AS observations, c.slots::text AS slots
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_histograms h ON h.kind = 'query_latency' AND (h.userid, h.dbid, h.toplevel, h.queryid) = (s.userid, s.dbid, s.toplevel, s.queryid)
       LEFT JOIN LATERAL (SELECT sum(x) AS slots FROM unnest(h.counts) x) c ON true
      WHERE s.query = ANY($1) AND (s.calls IS DISTINCT FROM h.observations OR s.calls IS DISTINCT FROM c.slots)`,
    [sqls.map(normalizedStatement)],
  );
  return rows;
}
