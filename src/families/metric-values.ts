import { METRIC_COLUMNS } from './index.js';

/** A column's value for one flush: ms as a number, counts as a bigint, or null when not measured. */
export type MetricValue = number | bigint | null;

/**
 * Turns raw deltas (in METRIC_COLUMNS order) into column values for the sets measured during
 * the flush's interval: a column no measured set fills is NULL (not a fake 0).
 *
 * @example
 * toColumnValues(deltas, new Set(['cpu'])); // calls: null, on_cpu_ms: 12.5, ...
 */
export function toColumnValues(deltas: readonly bigint[], measured: ReadonlySet<string>): MetricValue[] {
  return METRIC_COLUMNS.map((c, i) => {
    if (!c.measuredBy.some((set) => measured.has(set))) return null;
    const delta = deltas[i] ?? 0n;
    return c.unit === 'ns' ? Number(delta) / 1e6 : delta;
  });
}
