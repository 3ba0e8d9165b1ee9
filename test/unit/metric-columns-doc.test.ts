import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { packageRoot } from '../../src/package-root.js';
import { METRIC_TABLES, metricColumnType } from '../../src/storage/metric-schema.js';

/*
 * docs/metric-columns.md is the one list of metric columns a reader gets: written from the
 * families' own declarations, so a column added, moved or reworded there changes it, and this
 * test fails until it is regenerated (UPDATE_EXPECTED=1, then review git diff docs/).
 */
const DOC = join(packageRoot(), 'docs', 'metric-columns.md');

function metricColumnsDoc(): string {
  const cell = (text: string) => text.replace(/\|/g, '\\|');
  return [
    '# Metric columns',
    '',
    '<!-- Generated from src/families/*/ by test/unit/metric-columns-doc.test.ts (UPDATE_EXPECTED=1); do not edit. -->',
    '',
    `Every one is a column of ${METRIC_TABLES.map((t) => `\`bpf_stats.${t}\``).join(', ')} (the history`,
    "tables hold one flush interval's increment), and `\\d+` shows its meaning as the column's comment.",
    'NULL means "not measured": none of its probe sets was attached.',
    '',
    '| column | type | probe sets | meaning |',
    '| --- | --- | --- | --- |',
    ...METRIC_COLUMNS.map(
      (c) =>
        `| \`${c.column}\` | ${metricColumnType(c.unit)} | ${c.measuredBy.map((s) => `\`${s}\``).join(', ')} | ${cell(c.description)} |`,
    ),
    '',
  ].join('\n');
}

describe('docs/metric-columns.md', () => {
  it('lists every metric column as its family declares it', () => {
    const wanted = metricColumnsDoc();
    if (process.env.UPDATE_EXPECTED === '1') writeFileSync(DOC, wanted);
    expect(readFileSync(DOC, 'utf8'), 'regenerate with UPDATE_EXPECTED=1 npx vitest run test/unit/metric-columns-doc.test.ts').toBe(wanted);
  });
});
