import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

/** The files of src/ directly in it (errors.ts, exact-int.ts, ...) count as one room of their own. */
export const SRC_ROOT_FILES = '(src/*.ts)';

/** One folder importing another, with the imports that make it so ("from.ts -> specifier"). */
export interface FolderEdge {
  from: string;
  to: string;
  imports: string[];
}

/** The top-level folder of src/ a file belongs to (families/cpu/x.ts is in families). */
function folderOf(srcDir: string, file: string): string {
  const parts = relative(srcDir, file).split(sep);
  return parts.length === 1 ? SRC_ROOT_FILES : (parts[0] as string);
}

function typeScriptFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return typeScriptFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/**
 * Which top-level folders of `srcDir` import which, from every relative import, `import type`,
 * re-export and dynamic import() (TypeScript's own scanner, so a path in a comment or string is
 * not taken for one): a type-only import is a dependency of the design all the same.
 */
export function folderImports(srcDir: string): FolderEdge[] {
  const edges = new Map<string, FolderEdge>();
  for (const file of typeScriptFiles(srcDir)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = resolve(dirname(file), fileName);
      if (relative(srcDir, target).startsWith('..')) continue;
      const from = folderOf(srcDir, file);
      const to = folderOf(srcDir, target);
      if (from === to) continue;
      const key = `${from}\0${to}`;
      const edge = edges.get(key) ?? { from, to, imports: [] };
      edge.imports.push(`${relative(srcDir, file)} -> ${fileName}`);
      edges.set(key, edge);
    }
  }
  return [...edges.values()];
}

/**
 * Every cycle of folders, each as the folders in order and the imports along it; a pair of
 * folders importing each other is the shortest. One cycle per strongly connected group of
 * folders is enough to say what to untangle.
 */
export function folderCycles(edges: readonly FolderEdge[]): Array<{ folders: string[]; imports: string[] }> {
  const next = new Map<string, FolderEdge[]>();
  for (const edge of edges) next.set(edge.from, [...(next.get(edge.from) ?? []), edge]);
  const cycles: Array<{ folders: string[]; imports: string[] }> = [];
  const inCycle = new Set<string>();
  for (const start of [...next.keys()].sort()) {
    if (inCycle.has(start)) continue;
    // Breadth first from start: the shortest way back to it, if there is one.
    const cameFrom = new Map<string, FolderEdge>();
    const queue = [start];
    let closing: FolderEdge | undefined;
    while (queue.length && !closing) {
      const folder = queue.shift() as string;
      for (const edge of next.get(folder) ?? []) {
        if (edge.to === start) {
          closing = edge;
          break;
        }
        if (!cameFrom.has(edge.to)) {
          cameFrom.set(edge.to, edge);
          queue.push(edge.to);
        }
      }
    }
    if (!closing) continue;
    const path: FolderEdge[] = [closing];
    for (let edge = cameFrom.get(closing.from); edge; edge = cameFrom.get(edge.from)) path.unshift(edge);
    for (const edge of path) inCycle.add(edge.from);
    cycles.push({ folders: path.map((edge) => edge.from), imports: path.flatMap((edge) => edge.imports) });
  }
  return cycles;
}
