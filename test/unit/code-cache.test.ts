import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import vm from 'node:vm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { codeCachePath, loadBundle } from '../../src/cli/code-cache.js';

/** A CommonJS module whose answer is in its source; `digits` keeps every version the same length. */
const bundleSource = (digits: string) => `'use strict';\nfunction answer() { return ${digits}; }\nexports.answer = answer;\nexports.dir = __dirname;\n`;

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
  });

  it('starts without it when the file is damaged, and says in one line when it cannot save one', () => {
    writeFileSync(cache, Buffer.concat([createHash('sha256').update(readFileSync(bundle, 'utf8')).digest(), Buffer.from('not V8 data')]), { mode: 0o644 });
    const damaged = loadBundle(bundle, cache);
    expect(damaged.cacheUsed).toBe(false);
    expect(answer(damaged)).toBe(1111);

    const nowhere = loadBundle(bundle, join(dir, 'missing', 'cli.cjs.v8-cache'));
    expect(nowhere.saveCache()).toMatch(/^V8's code cache not saved \(.*missing\/cli\.cjs\.v8-cache: ENOENT\): every start compiles the CLI again/);
  });

  it('lives in systemd\'s CacheDirectory= when the service has one, else beside the bundle', () => {
    expect(codeCachePath('/usr/lib/node_modules/pg-bpf-stats/dist/pg-bpf-stats.cjs', {})).toBe('/usr/lib/node_modules/pg-bpf-stats/dist/pg-bpf-stats.cjs.v8-cache');
    expect(codeCachePath('/usr/lib/x/dist/pg-bpf-stats.cjs', { CACHE_DIRECTORY: '/var/cache/pg-bpf-stats:/var/cache/other' })).toBe('/var/cache/pg-bpf-stats/pg-bpf-stats.cjs.v8-cache');
  });
});
