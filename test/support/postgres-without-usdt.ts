import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { findPgBin } from '../../src/cluster/throwaway-cluster.js';

/**
 * A real PostgreSQL build without USDT probes, as many distributions ship it: the system's
 * binaries with the .note.stapsdt section removed. Postgres finds its share/ and lib/ relative
 * to its own path, so the copy lives in a tree that mirrors /usr with links to the real ones.
 * Returns the bin directory and a cleanup function.
 */
export function postgresWithoutUsdt(): { pgBin: string; remove(): void } {
  const realBin = findPgBin(); // /usr/lib/postgresql/N/bin
  const version = basename(dirname(realBin));
  const root = mkdtempSync(join(tmpdir(), 'pg-no-usdt-'));
  chmodSync(root, 0o755);
  const bin = join(root, 'usr/lib/postgresql', version, 'bin');
  mkdirSync(bin, { recursive: true });
  symlinkSync(join('/usr/lib/postgresql', version, 'lib'), join(root, 'usr/lib/postgresql', version, 'lib'));
  mkdirSync(join(root, 'usr/share/postgresql'), { recursive: true });
  symlinkSync(join('/usr/share/postgresql', version), join(root, 'usr/share/postgresql', version));
  // Real copies, not links: initdb and pg_ctl find `postgres` next to their resolved path.
  for (const tool of ['initdb', 'pg_ctl']) copyFileSync(join(realBin, tool), join(bin, tool));
  execFileSync('objcopy', ['--remove-section', '.note.stapsdt', join(realBin, 'postgres'), join(bin, 'postgres')]);
  return { pgBin: bin, remove: () => rmSync(root, { recursive: true, force: true }) };
}
