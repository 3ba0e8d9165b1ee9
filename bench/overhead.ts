/*
 * Overhead benchmark: what attaching pg-bpf-stats costs a saturated PostgreSQL.
 *
 * Workload: pgbench -S (select-only, many tiny transactions, so per-event costs weigh the most)
 * on a throwaway cluster, with as many clients as it takes to keep every core busy.
 *
 * Two kinds of figures, because they answer to noise differently:
 *  - Throughput. PAIRS interleaved pairs of runs, one without the sidecar and one with it, the
 *    order alternating (off,on then on,off ...) so slow drift of the machine cancels. TPS on a
 *    shared machine swings by ±10% between identical runs, so the headline is the median of the
 *    per-pair on/off ratios, not a ratio of means. Each on-run starts a fresh sidecar; every
 *    measured run, off or on, follows LEAD_IN_SECONDS of the same load (the sidecar's settling
 *    time), so the figure is a long-running collector's and both start from a busy machine.
 *  - Cost. One more on-run with kernel.bpf_stats_enabled=1, in which the kernel times every run
 *    of every BPF program: bpftool's run_time_ns and run_cnt deltas give exact ns per event and
 *    events per transaction, stable where TPS is not. (That timing costs something itself,
 *    which is why the throughput pairs run without it.) The sidecar's own CPU comes from
 *    /proc/<pid>/stat. Both are set against the CPU budget of one transaction
 *    (cores × 1e6 µs / TPS off). For uprobes (the query set) run_time_ns leaves out the trap,
 *    so there the ratio says more.
 *
 * Run: node dist/bench/overhead.js [--pairs 5] [--seconds 10] [--clients 8] [--probes query] [--scale 10]
 * Needs root (BPF, sysctl), bpftool and PostgreSQL's server binaries; writes .bench/overhead-<label>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, release } from 'node:os';
import { join } from 'node:path';
import { parseProbeSets, PROBE_SETS } from '../src/attach/probe-sets.js';
import type { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../src/package-root.js';
import { LOAD_FLAGS, offRun, onRun, parseFlags, positiveInteger, prepareCluster, runBenchmark, type Resources } from './overhead-runs.js';
import { humanReport, markdownRow, pairLine, summarize, type BenchSettings, type OffRun, type OnRun, type PairResult } from './report.js';

const print = (line = '') => process.stdout.write(`${line}\n`);

const USAGE = 'usage: node dist/bench/overhead.js [--pairs 5] [--seconds 10] [--clients 8] [--probes query] [--scale 10]';

function parseSettings(argv: string[]): BenchSettings {
  const values = parseFlags(argv, { pairs: { type: 'string', default: '5' }, probes: { type: 'string' }, ...LOAD_FLAGS } as const, USAGE);
  const probes = values.probes?.trim() || undefined;
  if (probes) parseProbeSets(probes); // fail before starting a cluster
  return {
    // The default sets are attached either way; --probes adds to them.
    label: probes ? `default+${probes.split(',').map((s) => s.trim()).join('+')}` : 'default',
    probes,
    pairs: positiveInteger(values.pairs, '--pairs'),
    seconds: positiveInteger(values.seconds, '--seconds'),
    clients: positiveInteger(values.clients, '--clients'),
    scale: positiveInteger(values.scale, '--scale'),
    cores: availableParallelism(),
  };
}

/** One interleaved pair; odd pairs run off first, even pairs on first. */
async function runPair(cluster: ThrowawayCluster, settings: BenchSettings, pair: number, statsEnabledBefore: string): Promise<PairResult> {
  const offFirst = pair % 2 === 1;
  let off: OffRun;
  let on: OnRun;
  if (offFirst) {
    off = await offRun(cluster, settings, pair);
    on = await onRun(cluster, settings, pair, statsEnabledBefore, false);
  } else {
    on = await onRun(cluster, settings, pair, statsEnabledBefore, false);
    off = await offRun(cluster, settings, pair);
  }
  return { pair, order: offFirst ? 'off,on' : 'on,off', off, on, ratio: on.tps / off.tps };
}

function writeJson(settings: BenchSettings, content: object): string {
  const dir = join(packageRoot(), '.bench');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `overhead-${settings.label}.json`);
  writeFileSync(path, `${JSON.stringify(content, null, 2)}\n`);
  return path;
}

async function benchmark(settings: BenchSettings, resources: Resources): Promise<void> {
  print(
    `pg-bpf-stats overhead: probe sets ${settings.label} (default = ${Object.values(PROBE_SETS).filter((s) => s.default).map((s) => s.name).join(', ')}); ${settings.pairs} pairs × ${settings.seconds} s of ` +
      `pgbench -S -c ${settings.clients} -j ${Math.min(2, settings.clients)}, scale ${settings.scale}, ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster, version } = await prepareCluster(resources, settings, print);
  const pairs: PairResult[] = [];
  for (let pair = 1; pair <= settings.pairs; pair++) {
    const result = await runPair(cluster, settings, pair, resources.statsEnabledBefore);
    print(pairLine(result));
    pairs.push(result);
  }
  // The exact per-event cost comes from one more on-run with kernel.bpf_stats_enabled.
  const costRun = await onRun(cluster, settings, 0, resources.statsEnabledBefore, true);
  print(`cost run (bpf_stats on): ${costRun.tps.toFixed(0)} tps`);
  const summary = summarize(pairs, costRun, settings.cores);
  print();
  for (const line of humanReport(summary, settings)) print(line);
  print();
  for (const line of markdownRow(summary, settings)) print(line);
  const path = writeJson(settings, { at: new Date().toISOString(), kernel: release(), pgbench: version, settings, summary, pairs, costRun });
  print();
  print(`results: ${path}`);
}

// Flags are parsed inside, so a bad one is a one-line error like any other.
runBenchmark('overhead', (resources) => benchmark(parseSettings(process.argv.slice(2)), resources));
