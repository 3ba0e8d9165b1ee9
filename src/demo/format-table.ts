/**
 * Formats rows as an aligned text table: NULL as empty, fractions with one decimal (two below 10).
 *
 * @example
 * formatTable([{ query: 'SELECT 1', ms: 0.25 }], ['query', 'ms']);
 */
export function formatTable(rows: Record<string, unknown>[], columns: string[]): string {
  const cell = (v: unknown) =>
    v === null || v === undefined ? '' : typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(Math.abs(v) < 10 ? 2 : 1) : String(v);
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns), line(widths.map((w) => '-'.repeat(w))), ...rows.map((r) => line(columns.map((c) => cell(r[c]))))].join('\n');
}
