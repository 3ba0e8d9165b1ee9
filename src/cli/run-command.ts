import type { CliOptions } from './parse-args.js';
import { oneLine, UserError } from '../errors.js';
import { Sidecar } from '../sidecar/sidecar.js';

/**
 * `pg-bpf-stats run`: collect until SIGINT/SIGTERM (or --duration), then detach everything.
 * `started` is called once it is collecting (the launcher saves V8's code cache then).
 */
export async function runCommand(options: CliOptions, log: (line: string) => void, started: () => void = () => undefined): Promise<number> {
  // The metrics port is bound first: an address in use fails before anything is created. The
  // exporter (prom-client, node's http and cluster modules) is loaded only when asked for: a
  // start without it skips their loading (bench/journal/start-up.md#the-probes-before-the-schema-the-first-rows-at-once).
  const metrics = options.metrics
    ? await (await import('../exporters/prometheus/start-metrics.js')).startMetrics(options.metrics, options.dsn, log)
    : null;
  // Signals are taken from here on: the probes attach early in the start, and a SIGUSR1 or a
  // SIGTERM sent once they are (a supervisor, a script) must not kill the process. What arrives
  // before the start is done is done once it is; a second SIGINT or SIGTERM ends it at once.
  let sidecar: Sidecar | null = null;
  let pauseWhenStarted = false;
  const pause = () => {
    if (!sidecar) pauseWhenStarted = true;
    // A pause that fails to write its last flush still pauses; the figures go out with a later one.
    else void sidecar.pause().catch((error: unknown) => log(`pause: ${oneLine(error)}`));
  };
  const resume = () => {
    if (!sidecar) pauseWhenStarted = false;
    else {
      try {
        sidecar.resume();
      } catch (error) {
        log(`resume failed: ${oneLine(error)}`);
      }
    }
  };
  process.on('SIGUSR1', pause);
  process.on('SIGUSR2', resume);
  const stopSignal = new Promise<string>((resolve) => {
    const stop = (signal: string) => {
      // A start that waits (an unreachable server) would otherwise seem to ignore the signal.
      if (!sidecar) log(`${signal} during the start: stopping once it is done (${signal} again stops at once)`);
      resolve(signal);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
  });
  sidecar = await Sidecar.start({
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
  const running = sidecar;
  metrics?.attach(running);
  log(`collecting every ${options.intervalMs} ms; SIGINT or SIGTERM stops, SIGUSR1 pauses, SIGUSR2 resumes`);
  if (pauseWhenStarted) pause();
  started();
  const reason = await new Promise<string | UserError>((resolve) => {
    void stopSignal.then(resolve);
    if (options.durationMs !== undefined) setTimeout(() => resolve('--duration elapsed'), options.durationMs).unref();
    void running.failed.then(resolve);
  });
  process.off('SIGUSR1', pause);
  process.off('SIGUSR2', resume);
  log(`${reason instanceof UserError ? 'cannot go on' : reason}: detaching and writing the last figures`);
  await running.stop(reason instanceof UserError ? `failed: ${reason.message}` : `stopped (${reason})`);
  await metrics?.close();
  if (reason instanceof UserError) throw reason;
  const last = running.lastFlush;
  log(
    `stopped; last flush ${last?.error ? `failed: ${last.error}` : `wrote ${last?.queries ?? 0} query and ${last?.backends ?? 0} backend rows`}`,
  );
  return 0;
}
