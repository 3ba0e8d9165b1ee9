import { execFileSync } from 'node:child_process';

/**
 * Takes one file out of the page cache, so the next read of it comes from the disk: its dirty
 * pages are written first (`sync FILE`, an fsync of that file only), then dd's `iflag=nocache`
 * with `count=0` asks for posix_fadvise(POSIX_FADV_DONTNEED) over the whole file. The rest of
 * the host's cache is left alone (no drop_caches). Pages mapped by a process stay cached.
 *
 * @example
 * evictFromPageCache('/tmp/pg-bpf-stats-x/data/base/5/16384');
 */
export function evictFromPageCache(path: string): void {
  execFileSync('sync', [path]);
  execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none']);
}
