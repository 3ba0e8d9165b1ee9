import type pg from 'pg';

/**
 * What the node itself still holds of the query keys, for the row retention: the keys its
 * pg_stat_statements holds (their rows are never deleted), the keys running now (a long
 * statement has figures before pg_stat_statements stores it) and pg_stat_statements.max, which
 * sizes the bounds (src/retention/row-retention.ts).
 */
export interface HeldQueryKeys {
  /** pg_stat_statements.max on the node (5000, its default, when it is not loaded). */
  max: number;
  /** The keys the node's pg_stat_statements holds; null when it cannot be read whole there (not installed, or other roles' query ids hidden from us). */
  pgss: { userid: number[]; dbid: number[]; toplevel: boolean[]; queryid: string[] } | null;
  /** Keys of the statements running on the node now (any toplevel). */
  running: { userid: number[]; dbid: number[]; queryid: string[] };
}

const PGSS_DEFAULT_MAX = 5000;

/** Reads HeldQueryKeys from the node (two or three statements; pg_stat_statements without its texts). */
export async function readHeldQueryKeys(node: pg.ClientBase): Promise<HeldQueryKeys> {
  const { rows } = await node.query<{ max: string | null; schema: string | null; userid: number[]; dbid: number[]; queryid: string[] }>(
    `SELECT pg_catalog.current_setting('pg_stat_statements.max', true) AS max,
            (SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
              WHERE e.extname = 'pg_stat_statements') AS schema,
            coalesce(array_agg(a.usesysid), '{}') AS userid, coalesce(array_agg(a.datid), '{}') AS dbid,
            coalesce(array_agg(a.query_id::text), '{}') AS queryid
       FROM pg_catalog.pg_stat_activity a WHERE a.query_id IS NOT NULL AND a.query_id <> 0 AND a.usesysid IS NOT NULL`,
  );
  const row = rows[0]!;
  const max = Number(row.max) > 0 ? Number(row.max) : PGSS_DEFAULT_MAX;
  const running = { userid: row.userid.map(Number), dbid: row.dbid.map(Number), queryid: row.queryid };
  if (!row.schema) return { max, pgss: null, running };
  try {
    const { rows: keys } = await node.query<{ userid: number[]; dbid: number[]; toplevel: boolean[]; queryid: string[]; hidden: boolean }>(
      // (schema: quote_ident'ed by the server above)
      `SELECT coalesce(array_agg(s.userid), '{}') AS userid, coalesce(array_agg(s.dbid), '{}') AS dbid,
              coalesce(array_agg(s.toplevel), '{}') AS toplevel, coalesce(array_agg(s.queryid::text), '{}') AS queryid,
              coalesce(bool_or(s.queryid IS NULL), false) AS hidden
         FROM ${row.schema}.pg_stat_statements(false) s`,
    );
    const k = keys[0]!;
    // Without pg_read_all_stats other roles' query ids read as NULL: a partial set would let rows of keys it still holds go.
    if (k.hidden) return { max, pgss: null, running };
    return { max, pgss: { userid: k.userid.map(Number), dbid: k.dbid.map(Number), toplevel: k.toplevel, queryid: k.queryid }, running };
  } catch (error) {
    const code = (error as { code?: string }).code;
    // Not loaded (55000), not readable (42501), an older extension without toplevel (42703): no set to protect with.
    if (code === '55000' || code === '42501' || code === '42703' || code === '42883') return { max, pgss: null, running };
    throw error;
  }
}
