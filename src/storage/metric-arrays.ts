import { sql, type RawBuilder } from 'kysely';
import { METRIC_COLUMNS, type MetricColumnName } from '../families/index.js';
import type { MetricValue } from '../families/metric-values.js';
import type { BackendRow } from './metric-row.js';
import { binaryArray, type ArrayElementType } from './binary-array.js';

const ELEMENT_TYPE: Record<'ns' | 'count', ArrayElementType> = { ns: 'float8', count: 'int8' };

/** The metric column names, in METRIC_COLUMNS order. */
export const METRIC_COLUMN_NAMES: readonly MetricColumnName[] = METRIC_COLUMNS.map((c) => c.column);

/** Each metric column's SQL type (milliseconds float8, counts int8), in METRIC_COLUMNS order. */
export const METRIC_COLUMN_TYPES: readonly ArrayElementType[] = METRIC_COLUMNS.map((c) => ELEMENT_TYPE[c.unit]);

/** One binary array parameter per metric column, cast to its column type (the unnest(...) arguments). */
export function metricArrays(rows: MetricValue[][]): RawBuilder<unknown> {
  return sql.join(
    METRIC_COLUMN_TYPES.map(
      (type, i) =>
        sql`${binaryArray(
          type,
          rows.map((v) => v[i]),
        )}::${sql.raw(`${type}[]`)}`,
    ),
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
 * A backend row's identity, one array parameter per column: pid, start (µs), type, datid,
 * usesysid, queryid (the first unnest(...) arguments of backend_stats and its history).
 */
export function backendIdentityArrays(rows: readonly BackendRow[]): RawBuilder<unknown> {
  return sql`${binaryArray(
    'int4',
    rows.map((r) => r.pid),
  )}::int4[], ${binaryArray(
    'int8',
    rows.map((r) => r.backendStartUs),
  )}::int8[],
             ${rows.map((r) => r.backendType)}::text[], ${binaryArray(
               'oid',
               rows.map((r) => r.datid),
             )}::oid[],
             ${binaryArray(
               'oid',
               rows.map((r) => r.usesysid),
             )}::oid[], ${binaryArray(
               'int8',
               rows.map((r) => r.queryid),
             )}::int8[]`;
}
