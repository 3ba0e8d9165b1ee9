import { execFileSync } from 'node:child_process';

const ATTEMPTS = 5;
const PAUSE_MS = 50;

/**
 * Takes one file out of the page cache, so the next read of it comes from the disk: its dirty
 * pages are written first (`sync FILE`, an fsync of that file only), then dd's `iflag=nocache`
 * with `count=0` asks for posix_fadvise(POSIX_FADV_DONTNEED) over the whole file. The rest of
 * the host's cache is left alone (no drop_caches). Pages mapped by a process stay cached, and
 * a page the kernel is busy with at that moment is skipped, so it looks again (`fincore`) and
 * tries up to 5 times.
 *
 * @returns the bytes of the file still cached: 0 when the next read is all from the disk; null
 * where fincore is not installed (util-linux-extra on Debian 12; `npm test` installs it), after
 * one eviction.
 * @example
 * expect(evictFromPageCache('/tmp/pg-bpf-stats-x/data/base/5/16384')).toBe(0);
 */
export function evictFromPageCache(path: string): number | null {
  for (let attempt = 1; ; attempt++) {
    execFileSync('sync', [path]);
    execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none']);
    const cached = cachedBytes(path);
    if (cached === null || cached === 0 || attempt === ATTEMPTS) return cached;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, PAUSE_MS);
  }
}

/** The bytes of `path` in the page cache (util-linux's fincore, which asks mincore); null without fincore. */
function cachedBytes(path: string): number | null {
  try {
    return Number(execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', path], { encoding: 'utf8' }).trim());
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') return null;
    throw error;
  }
}
