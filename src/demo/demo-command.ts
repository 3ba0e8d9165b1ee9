import type { ProbeSetName } from '../families/index.js';
import { ThrowawayCluster } from '../cluster/throwaway-cluster.js';
import { oneLine } from '../errors.js';
import { connect } from '../storage/connect.js';
import { Sidecar } from '../sidecar/sidecar.js';
import { attachSupportedSets } from './attach-supported-sets.js';
import { printReport } from './report.js';
import { prepareWorkload, WORKLOAD } from './workload.js';
import type { DemoFacts } from './workload-context.js';

const DEFAULT_WORKLOAD_MS = 25_000;
/** Small, so that demo_cold (64 MB) is read from the kernel, not from shared buffers. */
const SHARED_BUFFERS = '16MB';

/**
 * `pg-bpf-stats demo`: a throwaway cluster, the collector attached to it with every probe set
 * this host supports, a workload that provokes each metric family with a known cause, and a
 * report from the views next to that cause; removes the cluster (and the memory cgroup it
 * made) at the end, on errors and on SIGINT/SIGTERM.
 */
export interface DemoOptions {
  /** Flush period of the demo's collector. */
  intervalMs: number;
  /** Opt-in sets besides every set this host supports (usually none). */
  probeSets: ProbeSetName[];
  /** Workload length (default 25 s). */
  durationMs: number | undefined;
}

export async function demoCommand(options: DemoOptions, print: (line: string) => void): Promise<number> {
  const durationMs = options.durationMs ?? DEFAULT_WORKLOAD_MS;
  print(`[1/5] starting a throwaway PostgreSQL cluster (system binaries, pg_stat_statements preloaded, shared_buffers ${SHARED_BUFFERS})`);
  const cluster = await ThrowawayCluster.start({ settings: { shared_buffers: `'${SHARED_BUFFERS}'` } });
  let sidecar: Sidecar | null = null;
  // Undo work of the workload (a memory cgroup), run before the cluster goes, newest first.
  const cleanups: Array<() => void> = [];
  // One cleanup, shared by the signal handler and the normal exit path, each awaiting all of it.
  let stopping: Promise<void> | null = null;
  const stopAll = () =>
    (stopping ??= (async () => {
      for (const cleanup of cleanups.splice(0).reverse()) {
        try {
          cleanup();
        } catch (error) {
          print(`cleanup failed: ${oneLine(error)}`);
        }
      }
      await sidecar?.stop();
      await cluster.stop();
    })());
  const onSignal = () => {
    print('interrupted: cleaning up');
    void stopAll().then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const dsn = cluster.connectionString();
    print(`      ${dsn}, data in ${cluster.dataDir}`);
    print('[2/5] creating the demo tables (demo_accounts 100k rows, demo_cold ~62 MB, demo_hot) and pg_stat_statements');
    const facts: DemoFacts = { cold: await prepareWorkload(dsn, cluster.dataDir) };
    print('[3/5] starting the collector');
    sidecar = await Sidecar.start({
      connectionString: dsn,
      intervalMs: options.intervalMs,
      probeSets: options.probeSets,
      // Each opt-in attach is summed up in one line below.
      log: (line) => /^attached probe set \w+$/.test(line) || print(`      ${line}`),
    });
    const unsupported = attachSupportedSets(sidecar);
    print(`      probe sets attached: ${sidecar.attached().join(', ')}`);
    for (const [name, reason] of Object.entries(unsupported)) print(`      ${name}: ${reason}`);
    print(`[4/5] running the workload for ${durationMs / 1000}s:`);
    for (const step of WORKLOAD) print(`      - ${step.label}`);
    const deadline = Date.now() + durationMs;
    const ticker = setInterval(
      () =>
        print(
          `      ... ${Math.max(0, Math.round((deadline - Date.now()) / 1000))}s left, last flush ${sidecar?.lastFlush?.error ?? `${sidecar?.lastFlush?.queries ?? 0} query rows`}`,
        ),
      5000,
    );
    try {
      const context = {
        dsn,
        deadline,
        facts,
        print: (line: string) => print(`      ${line}`),
        onCleanup: (fn: () => void) => void cleanups.push(fn),
      };
      await Promise.all(WORKLOAD.map((step) => step.run(context)));
    } finally {
      clearInterval(ticker);
    }
    await sidecar.flush();
    print('[5/5] report');
    print('');
    const client = await connect(dsn);
    try {
      await printReport({ client, print, facts, attached: sidecar.attached(), unsupported });
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
