import { mkdirSync, symlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * A tree under `root` that mirrors /usr for the PostgreSQL version of `realBin`
 * (/usr/lib/postgresql/N/bin), with links to its lib/ and share/: postgres finds them next to its
 * resolved path, so a binary copied into the returned bin directory runs as the system's does.
 */
export function mirrorPostgresTree(root: string, realBin: string): string {
  const version = basename(dirname(realBin));
  const bin = join(root, 'usr/lib/postgresql', version, 'bin');
  mkdirSync(bin, { recursive: true });
  symlinkSync(join('/usr/lib/postgresql', version, 'lib'), join(root, 'usr/lib/postgresql', version, 'lib'));
  mkdirSync(join(root, 'usr/share/postgresql'), { recursive: true });
  symlinkSync(join('/usr/share/postgresql', version), join(root, 'usr/share/postgresql', version));
  return bin;
}
