import type { CliOptions } from './parse-args.js';
import { oneLine, UserError } from '../errors.js';
import { Sidecar } from '../sidecar/sidecar.js';
import { startMetrics } from '../exporters/prometheus/start-metrics.js';

/** `pg-bpf-stats run`: collect until SIGINT/SIGTERM (or --duration), then detach everything. */
export async function runCommand(options: CliOptions, log: (line: string) => void): Promise<number> {
  // The metrics port is bound first: an address in use fails before anything is created.
  const metrics = options.metrics ? await startMetrics(options.metrics, options.dsn, log) : null;
  const sidecar = await Sidecar.start({
    connectionString: options.dsn,
    sink: options.sink,
    node: options.node,
    intervalMs: options.intervalMs,
    probeSets: options.probeSets,
    historyRetentionMs: options.historyRetentionMs,
    historyIntervalMs: options.historyIntervalMs,
    postmasterWaitMs: options.postmasterWaitMs,
    rowRetentionMs: options.rowRetentionMs,
    log,
  }).catch(async (error: unknown) => {
    await metrics?.close();
    throw error;
  });
  metrics?.attach(sidecar);
  log(`collecting every ${options.intervalMs} ms; SIGINT or SIGTERM stops, SIGUSR1 pauses, SIGUSR2 resumes`);
  // A pause that fails to write its last flush still pauses; the figures go out with a later one.
  const pause = () => void sidecar.pause().catch((error: unknown) => log(`pause: ${oneLine(error)}`));
  const resume = () => {
    try {
      sidecar.resume();
    } catch (error) {
      log(`resume failed: ${oneLine(error)}`);
    }
  };
  process.on('SIGUSR1', pause);
  process.on('SIGUSR2', resume);
  const reason = await new Promise<string | UserError>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
    if (options.durationMs !== undefined) setTimeout(() => resolve('--duration elapsed'), options.durationMs).unref();
    void sidecar.failed.then(resolve);
  });
  process.off('SIGUSR1', pause);
  process.off('SIGUSR2', resume);
  log(`${reason instanceof UserError ? 'cannot go on' : reason}: detaching and writing the last figures`);
  await sidecar.stop(reason instanceof UserError ? `failed: ${reason.message}` : `stopped (${reason})`);
    await metrics?.close();
  if (reason instanceof UserError) throw reason;
  const last = sidecar.lastFlush;
  log(`stopped; last flush ${last?.error ? `failed: ${last.error}` : `wrote ${last?.queries ?? 0} query and ${last?.backends ?? 0} backend rows`}`);
  return 0;
}
