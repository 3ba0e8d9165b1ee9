/**
 * Reads the aligned text tables the demo prints (src/demo/format-table.ts): the dashes line
 * under the header gives each column's span, so empty (NULL) cells keep their place.
 */
export interface TextTable {
  columns: string[];
  rows: Record<string, string>[];
}

/** The first table in `lines` (header, dashes, rows up to the first blank or unaligned line), or null. */
export function parseTextTable(lines: string[]): TextTable | null {
  const dashes = lines.findIndex((l) => /^-+(\s+-+)*$/.test(l));
  if (dashes < 1) return null;
  const spans: [number, number][] = [];
  for (const m of lines[dashes]!.matchAll(/-+/g)) spans.push([m.index!, m.index! + m[0].length]);
  const cut = (line: string) => spans.map(([from, to], i) => line.slice(from, i === spans.length - 1 ? undefined : to).trim());
  const columns = cut(lines[dashes - 1]!);
  const rows: Record<string, string>[] = [];
  for (const line of lines.slice(dashes + 1)) {
    if (line.trim() === '') break;
    const cells = cut(line);
    rows.push(Object.fromEntries(columns.map((c, i) => [c, cells[i] ?? ''])));
  }
  return { columns, rows };
}
