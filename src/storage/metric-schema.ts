import type pg from 'pg';
import { oneLine, UserError } from '../errors.js';
import { METRIC_COLUMNS } from '../families/index.js';
import { QUERY_INCREMENTS_TYPE } from './query-increments.js';

/*
 * What of bpf_stats follows the metric column list (src/families/) rather than a migration's
 * text, checked or rebuilt by migrateSchema whenever it applies sql/, in its transaction and
 * under the collector's migration lock. Every name is schema-qualified and every type is the
 * catalog's (pg_catalog.*): nothing another role plants on a search path is used.
 */

/** The tables that carry every metric column, in which the flush writes them by name. */
export const METRIC_TABLES = ['query_stats', 'backend_stats', 'query_stats_history', 'backend_stats_history'] as const;

/** The probe set that is always attached: only its columns may be NOT NULL (never "not measured"). */
const ALWAYS_ON_SET = 'cpu';

/** A metric column's SQL type, as format_type() names it. */
export function metricColumnType(unit: 'ns' | 'count'): 'double precision' | 'bigint' {
  return unit === 'ns' ? 'double precision' : 'bigint';
}

/**
 * The attributes bpf_stats.query_increments must have, in order: the key, then the metric
 * columns in METRIC_COLUMNS order (the order QueryIncrements encodes a row's values in).
 */
export function queryIncrementsAttributes(): Array<{ name: string; type: string }> {
  return [
    { name: 'userid', type: 'oid' },
    { name: 'dbid', type: 'oid' },
    { name: 'toplevel', type: 'boolean' },
    { name: 'queryid', type: 'bigint' },
    ...METRIC_COLUMNS.map((c) => ({ name: c.column, type: metricColumnType(c.unit) })),
  ];
}

/**
 * Refuses, in one line, a schema whose tables lack a metric column the families declare, or
 * hold it with another type, or NOT NULL where its probe set may be off (the flush writes NULL
 * for "not measured"). A migration adds the column; this names the one that is missing.
 */
export async function checkMetricColumns(client: pg.ClientBase): Promise<void> {
  const { rows } = await client.query<{ relname: string; attname: string; type: string; notnull: boolean }>(
    `SELECT r.relname, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull
       FROM pg_catalog.pg_class r
       JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE r.relnamespace = 'bpf_stats'::pg_catalog.regnamespace AND r.relname = ANY($1::pg_catalog.text[])
        AND a.attname = ANY($2::pg_catalog.text[])`,
    [METRIC_TABLES, METRIC_COLUMNS.map((c) => c.column)],
  );
  const installed = new Map(rows.map((r) => [`${r.relname}.${r.attname}`, r]));
  const problems: string[] = [];
  for (const table of METRIC_TABLES) {
    for (const column of METRIC_COLUMNS) {
      const wanted = metricColumnType(column.unit);
      const found = installed.get(`${table}.${column.column}`);
      if (!found) problems.push(`bpf_stats.${table}.${column.column} is missing (a migration adds it: ${wanted}, nullable, no default)`);
      else if (found.type !== wanted) problems.push(`bpf_stats.${table}.${column.column} is ${found.type}, not ${wanted}`);
      else if (found.notnull && !(column.measuredBy as readonly string[]).includes(ALWAYS_ON_SET)) {
        problems.push(
          `bpf_stats.${table}.${column.column} is NOT NULL, but a flush writes NULL while ${column.measuredBy.join('/')} is off`,
        );
      }
    }
  }
  if (problems.length) {
    throw new UserError(
      `cannot bring the bpf_stats schema up to date: ${problems.join('; ')} (CONTRIBUTING.md, "Recipe: add a metric column")`,
    );
  }
}

/**
 * Makes bpf_stats.query_increments hold exactly queryIncrementsAttributes(): when the installed
 * type differs (a column added, moved or retyped in the list), it is dropped and created again.
 * ALTER TYPE ... ADD ATTRIBUTE could only append, and a flush encodes values by position.
 * Nothing stores the type (it only types the array a flush sends), so nothing is lost; left alone
 * when it already matches, its oid stays what running writers resolved.
 * Returns whether it was rebuilt.
 */
export async function rebuildQueryIncrementsType(client: pg.ClientBase): Promise<boolean> {
  const wanted = queryIncrementsAttributes();
  const { rows } = await client.query<{ name: string; type: string }>(
    `SELECT a.attname AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_catalog.pg_type t
       JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
      WHERE t.oid = pg_catalog.to_regtype($1)
      ORDER BY a.attnum`,
    [QUERY_INCREMENTS_TYPE],
  );
  if (rows.length === wanted.length && rows.every((r, i) => r.name === wanted[i]!.name && r.type === wanted[i]!.type)) return false;
  const attributes = wanted.map((a) => `${client.escapeIdentifier(a.name)} pg_catalog.${catalogTypeName(a.type)}`).join(', ');
  try {
    await client.query(`DROP TYPE IF EXISTS ${QUERY_INCREMENTS_TYPE}`);
  } catch (error) {
    if ((error as { code?: string }).code === '2BP01') {
      const detail = (error as { detail?: string }).detail;
      throw new UserError(
        `cannot rebuild ${QUERY_INCREMENTS_TYPE} for this version's metric columns: ${oneLine(error)}${detail ? ` (${oneLine(detail)})` : ''}; drop what depends on it and start again`,
      );
    }
    throw error;
  }
  await client.query(`CREATE TYPE ${QUERY_INCREMENTS_TYPE} AS (${attributes})`);
  return true;
}

/** The catalog's own name of a type format_type() spells out (pg_catalog."double precision" does not exist). */
function catalogTypeName(type: string): string {
  const names: Record<string, string> = { oid: 'oid', boolean: 'bool', bigint: 'int8', 'double precision': 'float8' };
  const name = names[type];
  if (!name) throw new Error(`no catalog name for ${type}`);
  return name;
}
