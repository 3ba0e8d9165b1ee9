import { describe, expect, it } from 'vitest';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { toColumnValues } from '../../src/families/metric-values.js';

describe('toColumnValues', () => {
  const deltas = METRIC_COLUMNS.map((c) => (c.unit === 'ns' ? 2_500_000n : 3n));

  it('turns nanoseconds into milliseconds and keeps counts as integers', () => {
    const values = toColumnValues(deltas, new Set(['cpu']));
    const byColumn = Object.fromEntries(METRIC_COLUMNS.map((c, i) => [c.column, values[i]]));
    expect(byColumn.on_cpu_ms).toBe(2.5);
    expect(byColumn.nvcsw).toBe(3n);
  });

  it('writes NULL, never 0, for columns no attached probe set measures', () => {
    const values = toColumnValues(deltas, new Set(['cpu']));
    const byColumn = Object.fromEntries(METRIC_COLUMNS.map((c, i) => [c.column, values[i]]));
    expect(byColumn.calls).toBeNull();
    expect(byColumn.reclaim_ms).toBeNull();
    const withQuery = toColumnValues(deltas, new Set(['cpu', 'query']));
    expect(withQuery[METRIC_COLUMNS.findIndex((c) => c.column === 'calls')]).toBe(3n);
  });
});
