import { probeCapabilities } from '../capabilities/probe-capabilities.js';
import { checkSink } from '../sink/sink.js';
import type { CliOptions } from './parse-args.js';

/** `pg-bpf-stats check`: one line per family; exit 0 when the sidecar can run. */
export async function checkCommand(options: CliOptions, print: (line: string) => void): Promise<number> {
  // Where bpf_stats would be written comes first: a standby without a sink, or a sink that
  // cannot take writes, is one line and exit 2 whatever the host supports.
  await checkSink(options.dsn, options.sink);
  // The same checks the sidecar writes into bpf_stats.capabilities.
  const lines = await probeCapabilities({ dsn: options.dsn });
  const width = Math.max(...lines.map((l) => l.name.length));
  for (const line of lines) print(`${line.ok ? 'ok  ' : line.required ? 'FAIL' : 'no  '} ${line.name.padEnd(width)}  ${line.detail}`);
  return lines.every((l) => l.ok || !l.required) ? 0 : 2;
}
