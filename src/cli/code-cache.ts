import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import vm from 'node:vm';

/*
 * The bundled CLI run through V8's code cache. Without it every start parses the 0.7 MB bundle
 * and compiles each function the start calls: ~25 ms of an idle start, ~100 ms of one on a busy
 * host (bench/journal/start-up.md#v8s-code-cache). A start that found no usable cache saves one once it is running,
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
  /** One line when a file at the cache's path was refused as unsafe (the start goes on without it), else null. */
  readonly refused: string | null;
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
    return {
      exports: createRequire(bundlePath)(bundlePath) as Record<string, unknown>,
      cacheUsed: false,
      refused: null,
      saveCache: () => null,
    };
  }
  const { cacheUsed, sourceHash, refused, ...compiled } = compile(bundlePath, cachePath);
  let script: vm.Script | null = compiled.script;
  const module = { exports: {} as Record<string, unknown> };
  const wrapper = script.runInThisContext() as (...args: unknown[]) => void;
  wrapper.call(module.exports, module.exports, createRequire(bundlePath), module, bundlePath, dirname(bundlePath));
  if (cacheUsed) script = null;
  return {
    exports: module.exports,
    cacheUsed,
    refused,
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
function compile(
  bundlePath: string,
  cachePath: string,
): { script: vm.Script; cacheUsed: boolean; sourceHash: Buffer; refused: string | null } {
  const source = readFileSync(bundlePath, 'utf8');
  const sourceHash = createHash('sha256').update(source).digest();
  const cache = readTrustedCache(cachePath, sourceHash);
  const cachedData = cache instanceof Buffer ? cache : undefined;
  const script = new vm.Script(`${WRAPPER_HEAD}${source}${WRAPPER_TAIL}`, { filename: bundlePath, lineOffset: -1, cachedData });
  const refused = typeof cache === 'string' ? `V8's code cache ${cachePath} not used: ${cache}` : null;
  return { script, cacheUsed: cachedData !== undefined && !script.cachedDataRejected, sourceHash, refused };
}

/**
 * The cache's V8 data, if the file was made from this source and only its user or root can have
 * written it: code runs from it, so a file another user could plant or change is never read.
 * A string says why a file that is there was refused; undefined: no file, or not this build's.
 *
 * Opened before it is checked, so the open itself must be safe: O_NOFOLLOW refuses a link
 * (whoever could plant it chose its target), O_NONBLOCK keeps a FIFO or a device from blocking
 * the start in open(); fstat of what was opened then decides, with no window to swap the file.
 */
function readTrustedCache(path: string, sourceHash: Buffer): Buffer | string | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    return code === 'ELOOP' ? 'a symbolic link' : `cannot open it (${code ?? String(error)})`;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return `not a regular file (${fileKind(stat)})`;
    if (stat.uid !== 0 && stat.uid !== process.geteuid?.()) return `owned by uid ${stat.uid}, not by this user or root`;
    if ((stat.mode & 0o022) !== 0) return `writable by others (mode ${(stat.mode & 0o777).toString(8)})`;
    const data = readFileSync(fd);
    if (data.length <= SOURCE_HASH_BYTES || !data.subarray(0, SOURCE_HASH_BYTES).equals(sourceHash)) return undefined;
    return data.subarray(SOURCE_HASH_BYTES);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function fileKind(stat: import('node:fs').Stats): string {
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isDirectory()) return 'a directory';
  if (stat.isSocket()) return 'a socket';
  if (stat.isCharacterDevice() || stat.isBlockDevice()) return 'a device';
  return 'not a file';
}
