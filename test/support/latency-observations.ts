import type pg from 'pg';

/** pg_stat_statements' text of a statement of statementOfTerms() (run-statements.ts): each constant a parameter. */
export const normalizedStatement = (sql: string) => sql.replace(/1/g, (_, at: number) => `$${sql.slice(0, at).split('1').length}`);

/**
 * Statements of `sqls` whose latency observations (query_histograms, kind query_latency: one
 * per execution, latency set) differ from pg_stat_statements' calls; a statement with no
 * histogram row has observations null.
 */
export async function latencyDisagreeing(admin: pg.Client, sqls: readonly string[]): Promise<Array<{ query: string; calls: string; observations: string | null }>> {
  const { rows } = await admin.query(
    `SELECT s.query, s.calls::text AS calls, h.observations::text AS observations
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_histograms h ON h.kind = 'query_latency' AND (h.userid, h.dbid, h.toplevel, h.queryid) = (s.userid, s.dbid, s.toplevel, s.queryid)
      WHERE s.query = ANY($1) AND s.calls IS DISTINCT FROM h.observations`,
    [sqls.map(normalizedStatement)],
  );
  return rows;
}
