import { createHash } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import vm from 'node:vm';

/*
 * The bundled CLI run through V8's code cache. Without it every start parses the 0.7 MB bundle
 * and compiles each function the start calls: ~25 ms of an idle start, ~100 ms of one on a busy
 * host (bench/README.md, "Start-up"). A start that found no usable cache saves one once it is running,
 * and the next start takes the compiled functions from it.
 *
 * V8 checks a cache against its own version and flags, and the source only by its length: the
 * cache file starts with the SHA-256 of the bundle it was made from, so a rebuilt bundle of the
 * same length never runs another build's code.
 *
 * The bundle cannot use import(): node 20 gives a vm script a loader for it only under an
 * experimental flag, or with a constant that prints a warning and is lost when the script comes
 * from the cache (measured). scripts/bundle.mjs refuses a bundle that calls it.
 */

const SOURCE_HASH_BYTES = 32;
/** The wrapper node's CommonJS loader puts around a module, on its own line (lineOffset -1 keeps the bundle's line numbers). */
const WRAPPER_HEAD = '(function (exports, require, module, __filename, __dirname) {\n';
const WRAPPER_TAIL = '\n})';

export interface LoadedBundle {
  /** What the bundle exported (`module.exports`). */
  readonly exports: Record<string, unknown>;
  /** Whether this start took its compiled functions from the cache. */
  readonly cacheUsed: boolean;
  /**
   * Saves what this process compiled so far for the next start, unless the cache was used: a
   * line for the log, or null when there was nothing to save. Never throws (a cache is only
   * ever a faster start).
   */
  saveCache(): string | null;
}

/**
 * Where the cache lives: systemd's CacheDirectory= (its first directory) when the service has
 * one, else beside the bundle (written when the package directory is writable to the user
 * running it, e.g. root for a package installed by root).
 */
export function codeCachePath(bundlePath: string, env: NodeJS.ProcessEnv = process.env): string {
  const cacheDirectory = env.CACHE_DIRECTORY?.split(':')[0];
  return join(cacheDirectory || dirname(bundlePath), `${basename(bundlePath)}.v8-cache`);
}

/** Compiles and runs a CommonJS bundle as node's loader would, with V8's code cache at `cachePath` when it holds one made from this very bundle. */
export function loadBundle(bundlePath: string, cachePath: string): LoadedBundle {
  // Node maps a stack's positions through the source map (--enable-source-maps) for what its own
  // loader loaded, not for a vm script: there the bundle is required, without the cache.
  if (process.sourceMapsEnabled) {
    return { exports: createRequire(bundlePath)(bundlePath) as Record<string, unknown>, cacheUsed: false, saveCache: () => null };
  }
  const { cacheUsed, sourceHash, ...compiled } = compile(bundlePath, cachePath);
  let script: vm.Script | null = compiled.script;
  const module = { exports: {} as Record<string, unknown> };
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(module.exports, module.exports, createRequire(bundlePath), module, bundlePath, dirname(bundlePath));
  if (cacheUsed) script = null;
  return {
    exports: module.exports,
    cacheUsed,
    saveCache() {
      if (!script) return null; // saved already, or the cache was used
      // Everything compiled up to now: the start's functions. Saved once; the script is let go.
      const data = script.createCachedData();
      script = null;
      const partial = `${cachePath}.${process.pid}.tmp`;
      try {
        writeFileSync(partial, Buffer.concat([sourceHash, data]), { mode: 0o644, flag: 'wx' });
        renameSync(partial, cachePath);
        return `saved V8's code cache for the next start (${cachePath}, ${(data.length / 1e6).toFixed(1)} MB)`;
      } catch (error) {
        rmSync(partial, { force: true });
        const code = (error as NodeJS.ErrnoException).code ?? String(error);
        return `V8's code cache not saved (${cachePath}: ${code}): every start compiles the CLI again; systemd's CacheDirectory= gives it a place (README, "Running as a service")`;
      }
    },
  };
}

/**
 * The bundle compiled, with the cache when it is usable. Its own function so that the cache's
 * megabyte is garbage before the bundle runs: still referenced then, it would outlive the start's
 * young-generation collections and stay in an idle process's RSS until a full one (measured).
 */
function compile(bundlePath: string, cachePath: string): { script: vm.Script; cacheUsed: boolean; sourceHash: Buffer } {
  const source = readFileSync(bundlePath, 'utf8');
  const sourceHash = createHash('sha256').update(source).digest();
  const cachedData = readTrustedCache(cachePath, sourceHash);
  const script = new vm.Script(`${WRAPPER_HEAD}${source}${WRAPPER_TAIL}`, { filename: bundlePath, lineOffset: -1, cachedData });
  return { script, cacheUsed: cachedData !== undefined && !script.cachedDataRejected, sourceHash };
}

/**
 * The cache's V8 data, if the file was made from this source and only its user or root can have
 * written it: code runs from it, so a file another user could plant or change is never read.
 */
function readTrustedCache(path: string, sourceHash: Buffer): Buffer | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return undefined;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || (stat.uid !== 0 && stat.uid !== process.geteuid?.()) || (stat.mode & 0o022) !== 0) return undefined;
    const data = readFileSync(fd);
    if (data.length <= SOURCE_HASH_BYTES || !data.subarray(0, SOURCE_HASH_BYTES).equals(sourceHash)) return undefined;
    return data.subarray(SOURCE_HASH_BYTES);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}
