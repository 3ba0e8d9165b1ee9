import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findPgBin } from '../../src/cluster/throwaway-cluster.js';
import { mirrorPostgresTree } from './postgres-tree.js';

/**
 * A real PostgreSQL build without USDT probes, as many distributions ship it: the system's
 * binaries with the .note.stapsdt section removed, in a tree that mirrors /usr (mirrorPostgresTree).
 * Returns the bin directory and a cleanup function.
 */
export function postgresWithoutUsdt(): { pgBin: string; remove(): void } {
  const realBin = findPgBin(); // /usr/lib/postgresql/N/bin
  const root = mkdtempSync(join(tmpdir(), 'pg-no-usdt-'));
  chmodSync(root, 0o755);
  const bin = mirrorPostgresTree(root, realBin);
  // Real copies, not links: initdb and pg_ctl find `postgres` next to their resolved path.
  for (const tool of ['initdb', 'pg_ctl']) copyFileSync(join(realBin, tool), join(bin, tool));
  execFileSync('objcopy', ['--remove-section', '.note.stapsdt', join(realBin, 'postgres'), join(bin, 'postgres')]);
  return { pgBin: bin, remove: () => rmSync(root, { recursive: true, force: true }) };
}
