import { METRIC_COLUMNS } from './index.js';
import type { ExactInt } from '../exact-int.js';

/** A column's value for one flush: ms as a number, counts as an ExactInt, or null when not measured. */
export type MetricValue = number | bigint | null;

/**
 * Turns raw deltas (in METRIC_COLUMNS order) into column values for the sets measured during
 * the flush's interval: a column no measured set fills is NULL (not a fake 0).
 *
 * @example
 * toColumnValues(deltas, new Set(['cpu'])); // calls: null, on_cpu_ms: 12.5, ...
 */
export function toColumnValues(deltas: readonly ExactInt[], measured: ReadonlySet<string>): MetricValue[] {
  return columnValuesFor(measured)(deltas);
}

/** toColumnValues for one set of measured probe sets, worked out once (a flush converts every row with it). */
export function columnValuesFor(measured: ReadonlySet<string>): (deltas: readonly ExactInt[]) => MetricValue[] {
  const kinds = METRIC_COLUMNS.map((c) => (!c.measuredBy.some((set) => measured.has(set)) ? 0 : c.unit === 'ns' ? 1 : 2));
  return (deltas) => {
    const out = new Array<MetricValue>(kinds.length);
    for (let i = 0; i < kinds.length; i++) {
      const kind = kinds[i];
      out[i] = kind === 0 ? null : kind === 1 ? Number(deltas[i] ?? 0) / 1e6 : (deltas[i] ?? 0);
    }
    return out;
  };
}
