import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

/** The directory holding package.json, from src/ (tsx, vitest) or dist/src/ (built). */
export function packageRoot(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`pg-bpf-stats: package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
  cached = dir;
  return dir;
}

/** The command the package installs (package.json's bin: the bundled CLI that scripts/build.sh makes), for tests and benches to run as a DBA would. */
export function cliPath(): string {
  const manifest = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { bin: Record<string, string> };
  return join(packageRoot(), manifest.bin['pg-bpf-stats']!);
}
