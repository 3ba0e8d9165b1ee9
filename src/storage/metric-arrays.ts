import { sql, type RawBuilder } from 'kysely';
import { METRIC_COLUMNS, type MetricColumnName } from '../families/index.js';
import type { MetricValue } from '../families/metric-values.js';

const PG_ARRAY_TYPE: Record<'ns' | 'count', string> = { ns: 'float8[]', count: 'int8[]' };

/** The metric column names, in METRIC_COLUMNS order. */
export const METRIC_COLUMN_NAMES: readonly MetricColumnName[] = METRIC_COLUMNS.map((c) => c.column);

/** One array parameter per metric column, cast to its column type (the unnest(...) arguments). */
export function metricArrays(rows: MetricValue[][]): RawBuilder<unknown> {
  return sql.join(
    METRIC_COLUMNS.map((c, i) => {
      return sql`${pgArray(rows.map((v) => v[i] ?? null))}::${sql.raw(PG_ARRAY_TYPE[c.unit])}`;
    }),
  );
}

/** The metric columns as identifiers (`calls, total_time_ms, ...`), or as `alias.column` references. */
export function metricColumnList(alias?: string): RawBuilder<unknown> {
  return sql.join(METRIC_COLUMN_NAMES.map((c) => (alias ? sql.ref(`${alias}.${c}`) : sql.id(c))));
}

/** A timestamptz from microseconds since the Unix epoch. */
export function usToTimestamp(us: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`timestamptz 'epoch' + ${us} * interval '1 microsecond'`;
}

/**
 * A Postgres array literal of numbers, bigints or booleans (`{1,NULL,2.5}`), sent as one text
 * parameter and cast by the statement: no element needs quoting, so this is a join, where the
 * driver's own array serialization quotes and escapes every element (a 10,000-row flush has
 * hundreds of thousands of them).
 */
export function pgArray(values: ReadonlyArray<number | bigint | boolean | string | null>): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (i) out += ',';
    out += v === null || v === undefined ? 'NULL' : typeof v === 'boolean' ? (v ? 't' : 'f') : String(v);
  }
  return `${out}}`;
}
