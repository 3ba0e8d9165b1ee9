import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../package-root.js';

/** The version in the package's own package.json (what `npm install` put there). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}
