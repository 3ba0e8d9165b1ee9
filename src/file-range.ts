import { readSync } from 'node:fs';

/**
 * `length` bytes of the open file `fd` from `position`, fewer at its end. A loop, because one
 * read may return less than asked (sysfs hands /sys/kernel/btf/vmlinux out 4 KB a read).
 *
 * @example
 * const header = readFileRange(fd, 0, 64);
 */
export function readFileRange(fd: number, position: number, length: number): Buffer {
  const bytes = Buffer.alloc(Math.max(0, length));
  let done = 0;
  while (done < bytes.length) {
    const n = readSync(fd, bytes, done, bytes.length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return bytes.subarray(0, done);
}
