import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/package-root.js';

/*
 * The code a document shows, for tests that run it as written: a command or a spec a reader
 * copies must be the one the test ran, so a change to the docs changes what is tested, and a
 * renamed section or a missing block fails the test instead of passing on old text.
 */

/**
 * The fenced code blocks tagged `language` under the heading `heading` of `docs/<file>` (up to
 * the next heading of the same or a higher level), in order. Throws when the section or its
 * blocks are missing.
 *
 * @example
 * const [sql] = documentedBlocks('operations.md', 'Roles', 'sql');
 */
export function documentedBlocks(file: string, heading: string, language: string): string[] {
  const lines = readFileSync(join(packageRoot(), 'docs', file), 'utf8').split('\n');
  const blocks: string[] = [];
  let level = 0;
  let fence: { mark: string; lines: string[] | null } | null = null;
  for (const line of lines) {
    const fenceLine = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/.exec(line);
    if (fence) {
      if (fenceLine && fenceLine[1]!.startsWith(fence.mark) && fenceLine[2] === '') {
        if (fence.lines) blocks.push(`${fence.lines.join('\n')}\n`);
        fence = null;
      } else fence.lines?.push(line);
      continue;
    }
    if (fenceLine) {
      fence = { mark: fenceLine[1]!, lines: level > 0 && fenceLine[2] === language ? [] : null };
      continue;
    }
    const title = /^ {0,3}(#{1,6})\s+(.*?)\s*$/.exec(line);
    if (!title) continue;
    if (title[2] === heading) level = title[1]!.length;
    else if (level > 0 && title[1]!.length <= level) break;
  }
  if (level === 0) throw new Error(`docs/${file}: no heading "${heading}"`);
  if (!blocks.length) throw new Error(`docs/${file}: no ${language} block under "${heading}"`);
  return blocks;
}
