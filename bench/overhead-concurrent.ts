/*
 * Overhead, measured side by side: what the collector costs the backends of the postmaster it
 * watches, with the machine's noise cancelled.
 *
 * bench/overhead.ts runs "without" and "with" one after the other; on our shared VMs TPS moves
 * by ±10–20% between consecutive runs, which buries a 2–3% effect (its 95% interval is printed).
 * Here two identical clusters run pgbench -S at the same time on the same cores, and the
 * collector watches only one of them (its probes filter on one postmaster). Whatever the host
 * does hits both runs alike, so TPS(watched) / TPS(unwatched) isolates the in-kernel cost paid
 * by the watched backends. The watched side alternates between pairs to cancel any asymmetry
 * between the clusters, and a first run with no collector shows that asymmetry.
 *
 * What it leaves out: the sidecar process's own CPU is taken from both clusters alike, so it is
 * reported separately (µs per watched transaction); add it to the ratio's loss for the total.
 *
 * Run: node dist/bench/overhead-concurrent.js [--pairs 12] [--seconds 10] [--clients 8] [--scale 10] [--probes query]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, release } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseProbeSets } from '../src/families/index.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../src/package-root.js';
import { initPgbench, runSelectOnly, type PgbenchResult } from './pgbench.js';
import { bootstrapMedianInterval, median } from './report.js';
import { SidecarProcess } from './sidecar-process.js';

const SIDECAR_SETTLE_MS = 2000;
const print = (line = '') => process.stdout.write(`${line}\n`);

interface ConcurrentPair {
  pair: number;
  watched: 'A' | 'B';
  watchedTps: number;
  unwatchedTps: number;
  ratio: number;
  sidecarUsPerWatchedTransaction: number;
}

function settings(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: {
      pairs: { type: 'string', default: '12' },
      seconds: { type: 'string', default: '10' },
      clients: { type: 'string', default: '8' },
      scale: { type: 'string', default: '10' },
      probes: { type: 'string' },
    },
  });
  const probes = values.probes?.trim() || undefined;
  if (probes) parseProbeSets(probes);
  return {
    label: probes
      ? probes
          .split(',')
          .map((s) => s.trim())
          .join('+')
      : 'cpu',
    probes,
    pairs: Number(values.pairs),
    seconds: Number(values.seconds),
    clients: Number(values.clients),
    scale: Number(values.scale),
  };
}

type Settings = ReturnType<typeof settings>;

/** pgbench -S on both clusters at once. */
async function bothAtOnce(a: ThrowawayCluster, b: ThrowawayCluster, s: Settings): Promise<[PgbenchResult, PgbenchResult]> {
  return Promise.all([runSelectOnly(a, s), runSelectOnly(b, s)]);
}

async function pair(n: number, clusters: Record<'A' | 'B', ThrowawayCluster>, s: Settings): Promise<ConcurrentPair> {
  const watched = n % 2 === 1 ? 'B' : 'A';
  const { sidecar } = await SidecarProcess.start({ dsn: clusters[watched].connectionString(), probes: s.probes });
  let result: ConcurrentPair;
  let code: number | null;
  try {
    await new Promise((resolve) => setTimeout(resolve, SIDECAR_SETTLE_MS));
    const cpuBefore = sidecar.cpuSeconds();
    const [a, b] = await bothAtOnce(clusters.A, clusters.B, s);
    const cpu = sidecar.cpuSeconds() - cpuBefore;
    const [on, off] = watched === 'A' ? [a, b] : [b, a];
    result = {
      pair: n,
      watched,
      watchedTps: on.tps,
      unwatchedTps: off.tps,
      ratio: on.tps / off.tps,
      sidecarUsPerWatchedTransaction: (cpu * 1e6) / on.transactions,
    };
  } finally {
    // A throw here would replace the error that ended the pair: the exit is judged after it.
    code = await sidecar.stop();
  }
  if (code !== 0) throw new Error(`sidecar exited with ${sidecar.exitDescription()}:\n${sidecar.log()}`);
  return result;
}

async function main(): Promise<void> {
  const s = settings(process.argv.slice(2));
  print(
    `pg-bpf-stats overhead, side by side: probe sets ${s.label}; ${s.pairs} pairs × ${s.seconds} s of pgbench -S -c ${s.clients} on each of two clusters, Linux ${release()}`,
  );
  const clusters: Partial<Record<'A' | 'B', ThrowawayCluster>> = {};
  const cleanup = async () => {
    await Promise.all([...SidecarProcess.live].map((p) => p.stop(10_000)));
    await Promise.all(Object.values(clusters).map((c) => c.stop()));
  };
  process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));
  try {
    clusters.A = await ThrowawayCluster.start();
    clusters.B = await ThrowawayCluster.start();
    await Promise.all([initPgbench(clusters.A, s.scale), initPgbench(clusters.B, s.scale)]);
    const all = clusters as Record<'A' | 'B', ThrowawayCluster>;
    await bothAtOnce(all.A, all.B, { ...s, seconds: 3 });
    const [a, b] = await bothAtOnce(all.A, all.B, s);
    print(`control (no collector): A ${a.tps.toFixed(0)} tps, B ${b.tps.toFixed(0)} tps, B/A ${(b.tps / a.tps).toFixed(3)}`);
    const pairs: ConcurrentPair[] = [];
    for (let n = 1; n <= s.pairs; n++) {
      const p = await pair(n, all, s);
      print(
        `pair ${n} (watching ${p.watched}): watched ${p.watchedTps.toFixed(0)} tps, unwatched ${p.unwatchedTps.toFixed(0)} tps, ratio ${p.ratio.toFixed(3)}`,
      );
      pairs.push(p);
    }
    const ratios = pairs.map((p) => p.ratio);
    const interval = bootstrapMedianInterval(ratios);
    const sidecarUs = median(pairs.map((p) => p.sidecarUsPerWatchedTransaction));
    // The two clusters share the cores evenly: the watched side has about one core's worth.
    const budgetUs = ((availableParallelism() / 2) * 1e6) / median(pairs.map((p) => p.watchedTps));
    print();
    print(
      `watched/unwatched TPS (median)  ${median(ratios).toFixed(3)}  [95% interval ${interval.ratioMedianLow.toFixed(3)}–${interval.ratioMedianHigh.toFixed(3)}, min ${Math.min(...ratios).toFixed(3)}, max ${Math.max(...ratios).toFixed(3)}]`,
    );
    print(
      `sidecar CPU                     ${sidecarUs.toFixed(2)} µs per watched transaction (${((sidecarUs / budgetUs) * 100).toFixed(2)} % of its CPU budget, not in the ratio)`,
    );
    const dir = join(packageRoot(), '.bench');
    mkdirSync(dir, { recursive: true });
    const path = join(dir, `overhead-concurrent-${s.label}.json`);
    writeFileSync(
      path,
      `${JSON.stringify({ at: new Date().toISOString(), kernel: release(), settings: s, control: { a, b }, pairs, interval }, null, 2)}\n`,
    );
    print(`results: ${path}`);
  } finally {
    await cleanup();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`overhead-concurrent: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
