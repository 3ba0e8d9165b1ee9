import { spawnSync, execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import vm from 'node:vm';
import ts from 'typescript';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { codeCachePath, loadBundle } from '../../src/cli/code-cache.js';
import { packageRoot } from '../../src/package-root.js';

/** A CommonJS module whose answer is in its source; `digits` keeps every version the same length. */
const bundleSource = (digits: string) =>
  `'use strict';\nfunction answer() { return ${digits}; }\nexports.answer = answer;\nexports.dir = __dirname;\n`;

let dir: string;
let bundle: string;
let cache: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-code-cache-'));
  bundle = join(dir, 'cli.cjs');
  cache = codeCachePath(bundle, {});
  writeFileSync(bundle, bundleSource('1111'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const answer = (loaded: ReturnType<typeof loadBundle>) => (loaded.exports.answer as () => number)();

describe('V8 code cache for the bundled CLI', () => {
  it('is saved by a start that had none and used by the next', () => {
    const first = loadBundle(bundle, cache);
    expect(first.cacheUsed).toBe(false);
    expect(answer(first)).toBe(1111);
    expect(first.exports.dir).toBe(dir);
    expect(first.saveCache()).toMatch(/^saved V8's code cache for the next start/);
    // Written once, readable by all and writable by its owner only; it starts with the source's hash.
    expect(statSync(cache).mode & 0o777).toBe(0o644);
    expect(readFileSync(cache).subarray(0, 32)).toEqual(createHash('sha256').update(readFileSync(bundle, 'utf8')).digest());
    expect(first.saveCache()).toBeNull();

    const second = loadBundle(bundle, cache);
    expect(second.cacheUsed).toBe(true);
    expect(answer(second)).toBe(1111);
    expect(second.saveCache()).toBeNull();
  });

  it('never runs another build of the same length (V8 alone would)', () => {
    loadBundle(bundle, cache).saveCache();
    writeFileSync(bundle, bundleSource('2222'));

    // What the hash guards against: V8 checks a cache against the source's length only, and runs
    // the cached build's functions in place of the new source's.
    const wrapped = (source: string) => `(function (exports, __dirname) {${source}})`;
    const run = (script: vm.Script) => {
      const exports: { answer?: () => number } = {};
      (script.runInThisContext() as (e: object, d: string) => void)(exports, dir);
      return exports.answer!();
    };
    const made = new vm.Script(wrapped(bundleSource('1111')), { filename: bundle });
    expect(run(made)).toBe(1111);
    const stale = new vm.Script(wrapped(bundleSource('2222')), { filename: bundle, cachedData: made.createCachedData() });
    expect(stale.cachedDataRejected).toBe(false);
    expect(run(stale)).toBe(1111);

    const rebuilt = loadBundle(bundle, cache);
    expect(rebuilt.cacheUsed).toBe(false);
    expect(answer(rebuilt)).toBe(2222);
    // The new build's start replaces the cache, and the one after uses it.
    expect(rebuilt.saveCache()).toMatch(/^saved/);
    const next = loadBundle(bundle, cache);
    expect(next.cacheUsed).toBe(true);
    expect(answer(next)).toBe(2222);
  });

  it('reads no cache that another user could have written or changed', () => {
    loadBundle(bundle, cache).saveCache();
    chmodSync(cache, 0o664);
    expect(loadBundle(bundle, cache).cacheUsed).toBe(false);
    chmodSync(cache, 0o644);
    expect(loadBundle(bundle, cache).cacheUsed).toBe(true);
    chownSync(cache, 65534, 65534);
    expect(loadBundle(bundle, cache).cacheUsed).toBe(false);
    expect(loadBundle(bundle, cache).refused).toBe(`V8's code cache ${cache} not used: owned by uid 65534, not by this user or root`);
  });

  it('starts without it when the file is damaged, and says in one line when it cannot save one', () => {
    writeFileSync(cache, Buffer.concat([createHash('sha256').update(readFileSync(bundle, 'utf8')).digest(), Buffer.from('not V8 data')]), {
      mode: 0o644,
    });
    const damaged = loadBundle(bundle, cache);
    expect(damaged.cacheUsed).toBe(false);
    expect(answer(damaged)).toBe(1111);

    const nowhere = loadBundle(bundle, join(dir, 'missing', 'cli.cjs.v8-cache'));
    expect(nowhere.saveCache()).toMatch(
      /^V8's code cache not saved \(.*missing\/cli\.cjs\.v8-cache: ENOENT\): every start compiles the CLI again/,
    );
  });

  it('refuses a symbolic link at its path in one line, even to a good cache of this build', () => {
    const real = join(dir, 'elsewhere.v8-cache');
    loadBundle(bundle, real).saveCache();
    expect(loadBundle(bundle, real).cacheUsed).toBe(true);
    symlinkSync(real, cache);
    const linked = loadBundle(bundle, cache);
    expect(linked.cacheUsed).toBe(false);
    expect(linked.refused).toBe(`V8's code cache ${cache} not used: a symbolic link`);
    expect(answer(linked)).toBe(1111);
  });

  it('refuses a FIFO at its path in one line (a writer holds it open here, so the old open could not hang this test)', () => {
    execFileSync('mkfifo', ['-m', '0644', cache]);
    const writer = openSync(cache, constants.O_RDWR);
    try {
      const loaded = loadBundle(bundle, cache);
      expect(loaded.cacheUsed).toBe(false);
      expect(loaded.refused).toBe(`V8's code cache ${cache} not used: not a regular file (a FIFO)`);
      expect(answer(loaded)).toBe(1111);
    } finally {
      closeSync(writer);
    }
  });

  it('does not block the start on a FIFO that nobody writes (a child process, killed if it hangs)', () => {
    execFileSync('mkfifo', ['-m', '0644', cache]);
    // code-cache.ts as plain JavaScript, so that a child node can load it without the build.
    const source = readFileSync(join(packageRoot(), 'src', 'cli', 'code-cache.ts'), 'utf8');
    const js = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
    writeFileSync(join(dir, 'code-cache.mjs'), js);
    const probe = `import { loadBundle } from ${JSON.stringify(join(dir, 'code-cache.mjs'))};
const b = loadBundle(${JSON.stringify(bundle)}, ${JSON.stringify(cache)});
process.stdout.write(JSON.stringify({ used: b.cacheUsed, refused: b.refused, answer: b.exports.answer() }));`;
    const started = Date.now();
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8', timeout: 10_000 });
    expect(child.signal, 'the child hung in open() and was killed').toBeNull();
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual({
      used: false,
      refused: `V8's code cache ${cache} not used: not a regular file (a FIFO)`,
      answer: 1111,
    });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("lives in systemd's CacheDirectory= when the service has one, else beside the bundle", () => {
    expect(codeCachePath('/usr/lib/node_modules/pg-bpf-stats/dist/pg-bpf-stats.cjs', {})).toBe(
      '/usr/lib/node_modules/pg-bpf-stats/dist/pg-bpf-stats.cjs.v8-cache',
    );
    expect(codeCachePath('/usr/lib/x/dist/pg-bpf-stats.cjs', { CACHE_DIRECTORY: '/var/cache/pg-bpf-stats:/var/cache/other' })).toBe(
      '/var/cache/pg-bpf-stats/pg-bpf-stats.cjs.v8-cache',
    );
  });
});
