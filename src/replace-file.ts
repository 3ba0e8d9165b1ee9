import { randomBytes } from 'node:crypto';
import { closeSync, constants, fsyncSync, lstatSync, openSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { UserError } from './errors.js';

/**
 * Writes `contents` to `path` without following a link another user planted there or racing one
 * in: the text goes to a new file in the same directory, opened O_CREAT|O_EXCL|O_NOFOLLOW under a
 * random name (a link or file already there makes the open fail, never followed), then is renamed
 * over `path`, which replaces a link rather than writing through it. A `path` that is a symbolic
 * link is refused in one line (a UserError naming `what`), so the report is not silently put
 * where the link pointed either. Readers see the old file or the whole new one, never a part.
 *
 * @example
 * replaceFile('/srv/reports/today.html', html, '--html');
 */
export function replaceFile(path: string, contents: string, what: string): void {
  const failed = (error: unknown) =>
    new UserError(`${what} ${path}: cannot write it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  let existing: ReturnType<typeof lstatSync> | undefined;
  try {
    existing = lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw failed(error);
  }
  if (existing?.isSymbolicLink())
    throw new UserError(`${what} ${path} is a symbolic link: refusing to write through it (remove it, or name another file)`);
  if (existing?.isDirectory()) throw new UserError(`${what} ${path} is a directory: name a file`);

  const temporary = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  let fd: number;
  try {
    fd = openSync(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
  } catch (error) {
    throw failed(error);
  }
  try {
    try {
      writeFileSync(fd, contents);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, path);
  } catch (error) {
    try {
      unlinkSync(temporary);
    } catch {
      // already renamed or gone: nothing to clean
    }
    throw failed(error);
  }
}
