import type pg from 'pg';

/*
 * What a plain login role can do where PUBLIC may create in `public` (PostgreSQL 14's default,
 * kept by clusters upgraded from it): create operators there that a reader whose search_path is
 * the default ("$user", public) resolves before the catalog's whenever they match its operand
 * types exactly and the catalog's do not (float8 / integer, numeric / integer, text || bigint,
 * float8 = integer for NULLIF, ...). Each planted operator raises an error naming itself when it
 * runs, in the reader's session: a query that ran one fails with "planted operator ... ran".
 */

/** Operator names the shipped SQL uses, written bare or as OPERATOR(pg_catalog.x), and the = of IN, NULLIF, USING, joins. */
export const OPERATOR_NAMES = ['=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '||', '~*', '~', '->>', '->', '~~', '~~*'] as const;

/**
 * Operand types of the shipped SQL: every column type of bpf_stats, pg_stat_statements and the
 * catalogs they join, and what literals, Grafana's macros ($__interval_ms: a bare integer) and
 * parameters are.
 */
export const OPERAND_TYPES = [
  'smallint',
  'integer',
  'bigint',
  'numeric',
  'real',
  'double precision',
  'text',
  'character varying',
  'name',
  'oid',
  'boolean',
  'timestamp with time zone',
  'timestamp without time zone',
  'interval',
  'jsonb',
  'json',
  '"char"',
  'text[]',
  'bigint[]',
  'unknown',
] as const;

/** The operator names in SQL text: every OPERATOR(pg_catalog.x) and every bare run of operator characters outside literals. */
export function operatorNamesIn(sql: string): Set<string> {
  const names = new Set<string>();
  for (const [, name] of sql.matchAll(/OPERATOR\(pg_catalog\.([^)\s]+)\)/g)) names.add(name!);
  const rest = sql
    .replace(/'(?:[^']|'')*'/g, ' ')
    .replace(/"(?:[^"]|"")*"/g, ' ')
    .replace(/OPERATOR\(pg_catalog\.[^)\s]+\)/g, ' ')
    .replace(/::/g, ' ')
    .replace(/\(\s*\*\s*\)|SELECT\s+\*|\.\*|\$\w+/gi, ' ')
    .replace(/--[^\n]*/g, ' ');
  for (const [name] of rest.matchAll(/[-+*/<>=~!@#%^&|?]+/g)) names.add(name);
  return names;
}

const COMPARISONS = ['=', '<>', '<', '>', '<=', '>=', '~*', '~', '~~', '~~*'];

/**
 * As `planter` (a plain role that may create in `schema`), creates `schema.name` for each of
 * `names` and each pair of OPERAND_TYPES that CREATE FUNCTION and CREATE OPERATOR take
 * (comparisons return boolean, the others their left operand's type), in one DO block. Returns
 * how many it made.
 */
export async function plantOperators(planter: pg.ClientBase, schema: string, names: Iterable<string>): Promise<number> {
  const quote = (list: readonly string[]) => `ARRAY[${list.map((t) => `'${t.replace(/'/g, "''")}'`).join(', ')}]::text[]`;
  // The planter's own statements must not run what it plants as it goes ('x' || i: text || integer).
  await planter.query('SET search_path = pg_catalog');
  await planter.query(`CREATE TEMP TABLE IF NOT EXISTS planted_count (made int)`);
  await planter.query(`TRUNCATE planted_count`);
  await planter.query(
    `DO $plant$
     DECLARE
       names text[] := ${quote([...names])};
       types text[] := ${quote(OPERAND_TYPES)};
       comparisons text[] := ${quote(COMPARISONS)};
       n text; l text; r text; fn text; made int := 0; i int := 0;
     BEGIN
       FOREACH n IN ARRAY names LOOP
         FOREACH l IN ARRAY types LOOP
           FOREACH r IN ARRAY types LOOP
             i := i + 1;
             fn := '${schema}.planted_' || i;
             BEGIN
               EXECUTE 'CREATE FUNCTION ' || fn || '(' || l || ', ' || r || ') RETURNS '
                 || CASE WHEN n = ANY (comparisons) THEN 'boolean' ELSE l END
                 || ' LANGUAGE plpgsql VOLATILE AS $f$ BEGIN RAISE EXCEPTION ''planted operator ${schema}.%(%, %) ran as %'', '
                 || quote_literal(n) || ', ' || quote_literal(l) || ', ' || quote_literal(r) || ', current_user; END $f$';
               EXECUTE 'CREATE OPERATOR ${schema}.' || n || ' (LEFTARG = ' || l || ', RIGHTARG = ' || r || ', FUNCTION = ' || fn || ')';
               made := made + 1;
             EXCEPTION WHEN OTHERS THEN
               -- A type CREATE FUNCTION or CREATE OPERATOR refuses here (unknown, a pseudo-type's return): nobody can plant that pair.
               NULL;
             END;
           END LOOP;
         END LOOP;
       END LOOP;
       INSERT INTO planted_count VALUES (made);
     END $plant$`,
  );
  const { rows } = await planter.query<{ made: number }>('SELECT made FROM planted_count');
  return rows[0]!.made;
}

/** Which planted operators `schema` holds, by name and operand types (to say what a test planted). */
export async function plantedOperators(client: pg.ClientBase, schema: string): Promise<string[]> {
  const { rows } = await client.query<{ op: string }>(
    // Its own operators qualified: it runs where they are planted.
    `SELECT pg_catalog.format('%s(%s, %s)', o.oprname, pg_catalog.format_type(o.oprleft, NULL), pg_catalog.format_type(o.oprright, NULL)) AS op
       FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) o.oprnamespace
      WHERE s.nspname OPERATOR(pg_catalog.=) $1::name ORDER BY 1`,
    [schema],
  );
  return rows.map((r) => r.op);
}
