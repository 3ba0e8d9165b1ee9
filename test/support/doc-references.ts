import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/*
 * References from code and docs to a document and a heading in it, checked against the files:
 * a moved section or a renamed heading breaks the build instead of leaving a citation that
 * leads nowhere. Three forms are cited in this repository:
 *   - a path from the repository's root, with or without an anchor: `bench/journal/memory.md#a-minified-bundle`
 *   - a Markdown link, relative to the file it is in: `[memory.md](../bench/journal/memory.md#...)`
 *   - a file and a heading's text in quotes: `(README, "Running without root")`
 */

/** The text a heading shows: Markdown's inline marks and link targets removed. */
function headingText(raw: string): string {
  return raw
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '')
    .replace(/<[^>]+>/g, '')
    .trim();
}

/**
 * GitHub's anchor for a heading: its text in lower case, without punctuation other than
 * hyphens and underscores, spaces turned into hyphens; a repeated anchor gets -1, -2, ...
 */
export function headingAnchor(raw: string): string {
  return headingText(raw)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

export interface Headings {
  /** GitHub's anchors of every heading, repeats numbered as GitHub numbers them. */
  anchors: Set<string>;
  /** Each heading's text as shown. */
  texts: Set<string>;
}

/** The headings of a Markdown text, outside fenced code blocks. */
export function markdownHeadings(markdown: string): Headings {
  const anchors = new Set<string>();
  const texts = new Set<string>();
  const seen = new Map<string, number>();
  let fence: string | null = null;
  for (const line of markdown.split('\n')) {
    const fenceMark = /^\s{0,3}(```|~~~)/.exec(line)?.[1];
    if (fenceMark) {
      if (fence === null) fence = fenceMark;
      else if (fence === fenceMark) fence = null;
      continue;
    }
    if (fence !== null) continue;
    const raw = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (raw === undefined) continue;
    const base = headingAnchor(raw);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
    texts.add(headingText(raw));
  }
  return { anchors, texts };
}

export interface DocReference {
  /** The file the reference is in, from the repository's root. */
  from: string;
  line: number;
  /** The text as cited, for the message. */
  cited: string;
  /** The document it names, as an absolute path. */
  target: string;
  /** An anchor (`#...`), or a heading's text in quotes, or neither. */
  anchor?: string;
  headingText?: string;
}

// Not the target of a Markdown link, which MARKDOWN_LINK reads relative to its file.
const ROOT_PATH = /(?<![\w./-]|\]\()((?:bench|docs)\/[\w./-]*\.md)(?:#([\w-]+))?/g;
const MARKDOWN_LINK = /\]\(([^)\s]+)\)/g;
const QUOTED_HEADING = /(?<![\w./-])(README|[\w./-]+\.md), "([^"]+)"/g;

/** Every reference to a document in one file's text. */
export function findReferences(root: string, file: string, text: string): DocReference[] {
  const from = relative(root, file);
  const references: DocReference[] = [];
  const lines = text.split('\n');
  lines.forEach((line, index) => {
    const at = { from, line: index + 1 };
    for (const [cited, path = '', anchor] of line.matchAll(ROOT_PATH)) {
      references.push({ ...at, cited, target: join(root, path), anchor });
    }
    for (const [cited, document = '', heading] of line.matchAll(QUOTED_HEADING)) {
      references.push({ ...at, cited, target: join(root, document === 'README' ? 'README.md' : document), headingText: heading });
    }
    if (!file.endsWith('.md')) return;
    for (const [, link = ''] of line.matchAll(MARKDOWN_LINK)) {
      if (/^[a-z][a-z+.-]*:/i.test(link)) continue; // https:, mailto:
      const [path = '', anchor] = link.split('#', 2);
      const target = path === '' ? file : resolve(dirname(file), path);
      references.push({ ...at, cited: link, target, anchor: anchor || undefined });
    }
  });
  return references;
}

/** Why a reference leads nowhere, or null when it leads to an existing file and heading. */
export function brokenReason(reference: DocReference, headingsOf: (path: string) => Headings): string | null {
  if (!existsSync(reference.target)) return 'no such file';
  if (reference.anchor === undefined && reference.headingText === undefined) return null;
  if (statSync(reference.target).isDirectory()) return 'an anchor into a directory';
  if (!reference.target.endsWith('.md')) return reference.anchor !== undefined ? null : 'not a Markdown file';
  const headings = headingsOf(reference.target);
  if (reference.anchor !== undefined && !headings.anchors.has(reference.anchor)) return `no heading with the anchor #${reference.anchor}`;
  if (reference.headingText !== undefined && !headings.texts.has(reference.headingText)) return `no heading "${reference.headingText}"`;
  return null;
}

const SCANNED_FOLDERS = ['src', 'bpf', 'native/src', 'scripts', 'test', 'bench', 'sql', 'migrations', 'docs'];
const SCANNED_ROOT_FILES = ['README.md', 'CONTRIBUTING.md', 'package.json'];
const SCANNED_EXTENSIONS = /\.(ts|mjs|js|c|h|cc|sql|md|sh|service|env)$/;
const SKIPPED_NAMES = new Set(['node_modules', 'build', 'dist', 'contract.ts']);

/** The files whose references are checked: sources, scripts, tests, benches, SQL and docs. */
export function scannedFiles(root: string): string[] {
  const files: string[] = SCANNED_ROOT_FILES.map((name) => join(root, name)).filter((path) => existsSync(path));
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (SKIPPED_NAMES.has(entry.name) || entry.name.startsWith('.')) continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (SCANNED_EXTENSIONS.test(entry.name)) files.push(path);
    }
  };
  for (const folder of SCANNED_FOLDERS) {
    if (existsSync(join(root, folder))) walk(join(root, folder));
  }
  return files;
}

/** Every reference in the repository, each with why it is broken (null when it is not). */
export function checkReferences(root: string): Array<DocReference & { broken: string | null }> {
  const cache = new Map<string, Headings>();
  const headingsOf = (path: string): Headings => {
    let headings = cache.get(path);
    if (!headings) {
      headings = markdownHeadings(readFileSync(path, 'utf8'));
      cache.set(path, headings);
    }
    return headings;
  };
  return scannedFiles(root).flatMap((file) =>
    findReferences(root, file, readFileSync(file, 'utf8')).map((reference) => ({
      ...reference,
      broken: brokenReason(reference, headingsOf),
    })),
  );
}
