import type { CliOptions } from './parse-args.js';
import { UserError } from '../errors.js';
import { Sidecar } from '../sidecar/sidecar.js';

/** `pg-bpf-stats run`: collect until SIGINT/SIGTERM (or --duration), then detach everything. */
export async function runCommand(options: CliOptions, log: (line: string) => void): Promise<number> {
  const sidecar = await Sidecar.start({
    connectionString: options.dsn,
    intervalMs: options.intervalMs,
    probeSets: options.probeSets,
    historyRetentionMs: options.historyRetentionMs,
    log,
  });
  log(`collecting every ${options.intervalMs} ms; SIGINT or SIGTERM stops`);
  const reason = await new Promise<string | UserError>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
    if (options.durationMs !== undefined) setTimeout(() => resolve('--duration elapsed'), options.durationMs).unref();
    void sidecar.failed.then(resolve);
  });
  log(`${reason instanceof UserError ? 'cannot go on' : reason}: detaching and writing the last figures`);
  await sidecar.stop();
  if (reason instanceof UserError) throw reason;
  const last = sidecar.lastFlush;
  log(`stopped; last flush ${last?.error ? `failed: ${last.error}` : `wrote ${last?.queries ?? 0} query and ${last?.backends ?? 0} backend rows`}`);
  return 0;
}
