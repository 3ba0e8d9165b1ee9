import { probeCapabilities } from '../capabilities/probe-capabilities.js';
import type { CliOptions } from './parse-args.js';

/** `pg-bpf-stats check`: one line per family; exit 0 when the sidecar can run. */
export async function checkCommand(options: CliOptions, print: (line: string) => void): Promise<number> {
  // The same checks the sidecar writes into bpf_stats.capabilities.
  const lines = await probeCapabilities({ dsn: options.dsn });
  const width = Math.max(...lines.map((l) => l.name.length));
  for (const line of lines) print(`${line.ok ? 'ok  ' : line.required ? 'FAIL' : 'no  '} ${line.name.padEnd(width)}  ${line.detail}`);
  return lines.every((l) => l.ok || !l.required) ? 0 : 2;
}
