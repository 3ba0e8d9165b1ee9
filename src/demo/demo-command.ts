import type { CliOptions } from '../cli/parse-args.js';
import { ThrowawayCluster } from '../cluster/throwaway-cluster.js';
import { PROBE_SETS } from '../attach/probe-sets.js';
import { connect } from '../sidecar/connect.js';
import { Sidecar } from '../sidecar/sidecar.js';
import { printReport } from './report.js';
import { prepareWorkload, WORKLOAD } from './workload.js';

const DEFAULT_WORKLOAD_MS = 20_000;

/**
 * `pg-bpf-stats demo`: a throwaway cluster, the collector attached to it, a workload that
 * provokes each metric family, and a report from the views; removes the cluster at the end.
 */
export async function demoCommand(options: CliOptions, print: (line: string) => void): Promise<number> {
  const durationMs = options.durationMs ?? DEFAULT_WORKLOAD_MS;
  print('[1/5] starting a throwaway PostgreSQL cluster (system binaries, pg_stat_statements preloaded)');
  const cluster = await ThrowawayCluster.start();
  let sidecar: Sidecar | null = null;
  const stopAll = async () => {
    await sidecar?.stop();
    await cluster.stop();
  };
  const onSignal = () => void stopAll().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const dsn = cluster.connectionString();
    print(`      ${dsn}, data in ${cluster.dataDir}`);
    print('[2/5] creating the demo table (100k rows) and pg_stat_statements');
    await prepareWorkload(dsn);
    print('[3/5] starting the collector');
    sidecar = await Sidecar.start({
      connectionString: dsn,
      intervalMs: options.intervalMs,
      probeSets: options.probeSets,
      log: (line) => print(`      ${line}`),
    });
    // Exact call counts when this build has USDT probes; the demo works without them too.
    if (PROBE_SETS.query.unsupportedReason(sidecar.target) === null) sidecar.attach('query');
    // Statement latency histograms (opt-in: about 0.2 us of BPF time per statement).
    sidecar.attach('latency');
    print(`[4/5] running the workload for ${durationMs / 1000}s:`);
    for (const step of WORKLOAD) print(`      - ${step.label}`);
    const deadline = Date.now() + durationMs;
    const ticker = setInterval(() => print(`      ... ${Math.max(0, Math.round((deadline - Date.now()) / 1000))}s left, last flush ${sidecar?.lastFlush?.error ?? `${sidecar?.lastFlush?.queries ?? 0} query rows`}`), 5000);
    try {
      await Promise.all(WORKLOAD.map((step) => step.run(dsn, deadline)));
    } finally {
      clearInterval(ticker);
    }
    await sidecar.flush();
    print('[5/5] report');
    print('');
    const client = await connect(dsn);
    try {
      await printReport(client, print);
    } finally {
      await client.end();
    }
    print('');
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    print('cleaning up: detaching probes, removing the throwaway cluster');
    await stopAll();
  }
}
