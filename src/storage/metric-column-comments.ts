import type pg from 'pg';
import { METRIC_COLUMNS } from '../families/index.js';

/**
 * COMMENT ON every metric column of every bpf_stats table and view that has it, from the
 * description its family gives (src/families/): a column's meaning is written once, next to
 * its definition, and `\d+` shows it everywhere. In the history tables a column holds one
 * flush interval's increment, and its comment says so. Runs after sql/, in its transaction.
 *
 * @example
 * await commentMetricColumns(client); // inside migrateSchema's transaction
 */
export async function commentMetricColumns(client: pg.ClientBase): Promise<void> {
  const description = new Map<string, string>(METRIC_COLUMNS.map((c) => [c.column, c.description]));
  const { rows } = await client.query<{ relation: string; history: boolean; column: string }>(
    `SELECT a.attrelid::regclass::text AS relation, r.relname LIKE '%\\_history' AS history, a.attname AS column
       FROM pg_class r
       JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE r.relnamespace = 'bpf_stats'::regnamespace AND r.relkind IN ('r', 'p', 'v') AND NOT r.relispartition
        AND a.attname = ANY($1)`,
    [[...description.keys()]],
  );
  if (!rows.length) return;
  // One round trip: COMMENT ON takes no parameters, so the text goes in as a quoted literal.
  const statements = rows.map(
    (r) =>
      `COMMENT ON COLUMN ${r.relation}.${client.escapeIdentifier(r.column)} IS ${client.escapeLiteral(
        `${r.history ? 'Increment over one flush interval. ' : ''}${description.get(r.column)!}`,
      )}`,
  );
  await client.query(statements.join(';\n'));
}
