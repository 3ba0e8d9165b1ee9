import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/package-root.js';
import { checkReferences, headingAnchor, markdownHeadings } from '../support/doc-references.js';

describe('headingAnchor', () => {
  it('makes the anchors GitHub makes', () => {
    // Anchors GitHub gave these headings on its rendered pages.
    expect(headingAnchor('What one context switch costs, part by part (goal 2)')).toBe('what-one-context-switch-costs-part-by-part-goal-2');
    expect(headingAnchor('A live view: `pg-bpf-stats top`')).toBe('a-live-view-pg-bpf-stats-top');
    expect(headingAnchor("Keys like pg_stat_statements'")).toBe('keys-like-pg_stat_statements');
    expect(headingAnchor('`--optimize-for-size`, tried and not taken')).toBe('--optimize-for-size-tried-and-not-taken');
    expect(headingAnchor('Soak (`bench/soak.ts`)')).toBe('soak-benchsoakts');
  });

  it('numbers repeated headings and skips fenced code', () => {
    const headings = markdownHeadings('# Notes\n\n## Runs\n\n```sh\n# not a heading\n```\n\n## Runs\n');
    expect([...headings.anchors]).toEqual(['notes', 'runs', 'runs-1']);
  });
});

describe('references to documents', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'doc-references-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('finds a missing file, a missing anchor and a missing quoted heading', () => {
    // Citations are written in pieces so that this test's own source holds no broken one.
    const docs = (path: string): string => ['docs', path].join('/');
    const readmeHeading = (heading: string): string => ['README', `"${heading}"`].join(', ');
    mkdirSync(join(scratch, 'docs'));
    mkdirSync(join(scratch, 'src'));
    writeFileSync(
      join(scratch, 'README.md'),
      `# Tool\n\n## Install\n\nSee [ops](${docs('ops.md#running')}) and [gone](${docs('gone.md')}).\n`,
    );
    writeFileSync(join(scratch, 'docs', 'ops.md'), '# Operations\n\n## Running\n\n[back](../README.md#install), [nowhere](#stopping)\n');
    const code = `// ${docs('ops.md#running')} ${docs('ops.md#walking')} (${readmeHeading('Install')}) (${readmeHeading('Uninstall')})`;
    writeFileSync(join(scratch, 'src', 'main.ts'), `${code}\n`);
    const broken = checkReferences(scratch)
      .filter((reference) => reference.broken)
      .map((reference) => `${reference.from}: ${reference.cited}: ${reference.broken}`);
    expect(broken.sort()).toEqual([
      `README.md: ${docs('gone.md')}: no such file`,
      `${docs('ops.md')}: #stopping: no heading with the anchor #stopping`,
      `src/main.ts: ${readmeHeading('Uninstall')}: no heading "Uninstall"`,
      `src/main.ts: ${docs('ops.md#walking')}: no heading with the anchor #walking`,
    ]);
  });

  it('every reference in the code and the docs leads to an existing file and heading', () => {
    const references = checkReferences(packageRoot());
    // The repository cites headings of its journal and docs about a hundred times: a scan that
    // finds few read nothing.
    expect(references.filter((reference) => reference.anchor || reference.headingText).length).toBeGreaterThan(60);
    const broken = references
      .filter((reference) => reference.broken)
      .map((reference) => `${reference.from}:${reference.line}: ${reference.cited}: ${reference.broken}`);
    expect(broken).toEqual([]);
  });
});
