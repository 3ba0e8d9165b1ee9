import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/package-root.js';
import { folderCycles, folderImports, SRC_ROOT_FILES } from '../support/folder-imports.js';

describe('folder imports of a scratch tree', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'folder-imports-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  const tree = (name: string, files: Record<string, string>): string => {
    const dir = join(scratch, name);
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    return dir;
  };

  it('finds a pair through a type-only import, and names the files', () => {
    const src = tree('pair', {
      'flush/writer.ts': "import { part } from '../families/cpu/part.js';\nexport const writer = part;\n",
      'families/cpu/part.ts': "import type { Seam } from '../../flush/seam.js';\nexport const part: Seam = 1;\n",
      'flush/seam.ts': 'export type Seam = number;\n',
    });
    expect(folderCycles(folderImports(src))).toEqual([
      {
        folders: ['families', 'flush'],
        imports: ['families/cpu/part.ts -> ../../flush/seam.js', 'flush/writer.ts -> ../families/cpu/part.js'],
      },
    ]);
  });

  it('finds a longer cycle through re-exports, dynamic imports and the files at the root of src', () => {
    const src = tree('ring', {
      'a/one.ts': "export { two } from '../b/two.js';\n",
      'b/two.ts': "export const two = () => import('../errors.js');\n",
      'errors.ts': "import '../outside.js';\nimport { one } from './a/one.js';\nexport { one };\n",
    });
    const cycles = folderCycles(folderImports(src));
    expect(cycles.map((cycle) => cycle.folders)).toEqual([[SRC_ROOT_FILES, 'a', 'b']]);
  });

  it('takes no comment, string, package or import within a folder for a dependency', () => {
    const src = tree('clean', {
      'a/one.ts':
        "// from '../b/two.js'\nimport pg from 'pg';\nimport { three } from './three.js';\nexport const one = [pg, three, \"import('../b/two.js')\"];\n",
      'a/three.ts': 'export const three = 3;\n',
      'b/two.ts': "import { one } from '../a/one.js';\nexport const two = one;\n",
    });
    expect(folderImports(src)).toEqual([{ from: 'b', to: 'a', imports: ['b/two.ts -> ../a/one.js'] }]);
    expect(folderCycles(folderImports(src))).toEqual([]);
  });
});

describe('src/', () => {
  it('has no folders that import each other, directly or around a cycle', () => {
    const edges = folderImports(join(packageRoot(), 'src'));
    // The scan sees the real tree: the run loop alone reaches into many folders.
    expect(edges.filter((edge) => edge.from === 'sidecar').length).toBeGreaterThan(5);
    const cycles = folderCycles(edges).map((cycle) => `${cycle.folders.join(' -> ')}: ${cycle.imports.join('; ')}`);
    expect(cycles).toEqual([]);
  });
});

describe('CONTRIBUTING.md', () => {
  it('lists every folder of src/ in its table of rooms', () => {
    const rooms = readFileSync(join(packageRoot(), 'CONTRIBUTING.md'), 'utf8');
    // Folders with TypeScript in them (git keeps no empty folder, a worktree may).
    const folders = readdirSync(join(packageRoot(), 'src'), { withFileTypes: true }).filter(
      (entry) =>
        entry.isDirectory() &&
        readdirSync(join(entry.parentPath, entry.name), { recursive: true }).some((name) => String(name).endsWith('.ts')),
    );
    expect(folders.length).toBeGreaterThan(10);
    expect(
      folders
        .map((folder) => `src/${folder.name}/`)
        .filter((folder) => !rooms.includes(`| \`${folder}`) && !rooms.includes(`, \`${folder}`)),
    ).toEqual([]);
  });
});
