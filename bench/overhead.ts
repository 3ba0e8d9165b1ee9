/*
 * Overhead benchmark: what attaching pg-bpf-stats costs a saturated PostgreSQL.
 *
 * Workload: pgbench -S (select-only, many tiny transactions, so per-event costs weigh the most)
 * on a throwaway cluster, with as many clients as it takes to keep every core busy.
 *
 * Two kinds of figures, because they answer to noise differently:
 *  - Throughput, by one of two methods. Both pair on with off and report the median of the
 *    on/off ratios, not a ratio of means, because TPS on a shared machine swings by ±10%
 *    between identical 10-s runs.
 *     - blocks (default): `pg-bpf-stats run` starts once and collects for the whole benchmark,
 *       as in production. One long pgbench run; every BLOCK seconds the sidecar is paused
 *       (SIGUSR1: every probe detached, nothing written) or resumed (SIGUSR2). Each on-block
 *       is set against the off-blocks on either side of it (bench/alternating-blocks.ts).
 *     - restart: PAIRS interleaved pairs of separate runs, one without the sidecar and one with
 *       a freshly started one (after LEAD_IN_SECONDS of load to settle), the order alternating.
 *       A young sidecar (JIT, first flushes) and 10-s runs make it the noisier of the two.
 *  - Cost. One more run with a fresh sidecar and kernel.bpf_stats_enabled=1, in which the
 *    kernel times every run of every BPF program: bpftool's run_time_ns and run_cnt deltas give
 *    exact ns per event and events per transaction, stable where TPS is not. (That timing costs
 *    something itself, which is why the throughput runs go without it.) The sidecar's own CPU
 *    comes from /proc/<pid>/stat. Both are set against the CPU budget of one transaction
 *    (cores × 1e6 µs / TPS off). For uprobes (the query set) run_time_ns leaves out the trap,
 *    so there the ratio says more.
 *
 * Run: node dist/bench/overhead.js [--method blocks|restart] [--pairs 60] [--block 6] [--seconds 10] [--clients 8] [--probes query] [--scale 10]
 * Needs root (BPF, sysctl), bpftool and PostgreSQL's server binaries; writes .bench/overhead-<label>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, release } from 'node:os';
import { join } from 'node:path';
import { parseProbeSets, PROBE_SETS } from '../src/families/index.js';
import type { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../src/package-root.js';
import { benchSchedule, runAlternating, SETTLE_SECONDS } from './alternating-blocks.js';
import {
  LOAD_FLAGS,
  METHOD_FLAGS,
  methodSettings,
  offRun,
  onRun,
  parseFlags,
  positiveInteger,
  prepareCluster,
  runBenchmark,
  type Resources,
} from './overhead-runs.js';
import {
  humanReport,
  markdownRow,
  pairLine,
  pairsThroughput,
  runsDescription,
  summarize,
  type BenchSettings,
  type OffRun,
  type OnRun,
  type PairResult,
} from './report.js';
import { SidecarProcess } from './sidecar-process.js';

const print = (line = '') => process.stdout.write(`${line}\n`);

const USAGE =
  'usage: node dist/bench/overhead.js [--method blocks|restart] [--pairs 60] [--block 6] [--seconds 10] [--clients 8] [--probes query] [--scale 10]';

function parseSettings(argv: string[]): BenchSettings {
  const values = parseFlags(argv, { ...METHOD_FLAGS, probes: { type: 'string' }, ...LOAD_FLAGS } as const, USAGE);
  const probes = values.probes?.trim() || undefined;
  if (probes) parseProbeSets(probes); // fail before starting a cluster
  return {
    // The default sets are attached either way; --probes adds to them.
    label: probes
      ? `default+${probes
          .split(',')
          .map((s) => s.trim())
          .join('+')}`
      : 'default',
    probes,
    ...methodSettings(values, 5, USAGE),
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

async function restartMethod(cluster: ThrowawayCluster, settings: BenchSettings, resources: Resources) {
  const pairs: PairResult[] = [];
  for (let pair = 1; pair <= settings.pairs; pair++) {
    const result = await runPair(cluster, settings, pair, resources.statsEnabledBefore);
    print(pairLine(result));
    pairs.push(result);
  }
  return { throughput: pairsThroughput(pairs), onRuns: pairs.map((p) => p.on), longLived: undefined, detail: { pairs } };
}

async function blocksMethod(cluster: ThrowawayCluster, settings: BenchSettings) {
  const { sidecar, attachMs } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: settings.probes });
  print(
    `sidecar attached in ${attachMs.toFixed(0)} ms; ${SETTLE_SECONDS} s of load to settle, then ${2 * settings.pairs + 1} blocks of ${settings.blockSeconds} s, off first`,
  );
  // The sidecar's CPU at each switch, in the order of run.toggles.
  const cpuAtSwitch: number[] = [];
  let run;
  try {
    run = await runAlternating(
      cluster,
      benchSchedule(settings, (on) => {
        cpuAtSwitch.push(sidecar.cpuSeconds());
        sidecar.setCollecting(on);
      }),
    );
  } catch (error) {
    await sidecar.stop();
    throw error;
  }
  // Every switch must have happened in the sidecar, or the blocks would be mislabelled.
  const log = sidecar.log();
  const pauses = (log.match(/(?:: |INFO\s+)paused: /g) ?? []).length;
  const resumes = (log.match(/(?:: |INFO\s+)resumed: /g) ?? []).length;
  if (pauses !== settings.pairs + 1 || resumes !== settings.pairs) {
    await sidecar.stop();
    throw new Error(
      `the sidecar logged ${pauses} pauses and ${resumes} resumes, expected ${settings.pairs + 1} and ${settings.pairs}:\n${log}`,
    );
  }
  const peakRssMb = sidecar.peakRssMb();
  // The sidecar's CPU from each resume to the next pause, and pgbench's transactions meanwhile.
  let cpuSecondsCollecting = 0;
  let transactionsCollecting = 0;
  for (let i = 0; i + 1 < run.toggles.length; i++) {
    const [from, to] = [run.toggles[i]!, run.toggles[i + 1]!];
    if (!from.on) continue;
    cpuSecondsCollecting += cpuAtSwitch[i + 1]! - cpuAtSwitch[i]!;
    transactionsCollecting += run.samples.filter((p) => p.at > from.at && p.at <= to.at).reduce((total, p) => total + p.tps, 0);
  }
  const code = await sidecar.stop();
  if (code !== 0) throw new Error(`sidecar exited with ${sidecar.exitDescription()} after SIGTERM:\n${log}`);
  for (const [i, r] of run.ratios.entries())
    print(`on-block ${i + 1}: on ${r.tpsOn.toFixed(0)} tps, off around it ${r.tpsOff.toFixed(0)} tps, on/off ${r.ratio.toFixed(3)}`);
  if (run.ratios.length < settings.pairs)
    print(`(${settings.pairs - run.ratios.length} on-blocks had no usable second: pgbench progress was late)`);
  return {
    throughput: { ratios: run.ratios.map((r) => r.ratio), tpsOff: run.ratios.map((r) => r.tpsOff), tpsOn: run.ratios.map((r) => r.tpsOn) },
    onRuns: [] as OnRun[],
    longLived: { attachMs, peakRssMb, cpuSecondsCollecting, transactionsCollecting },
    detail: { blocks: run.blocks, toggles: run.toggles, ratios: run.ratios },
  };
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
    `pg-bpf-stats overhead (${settings.method}): probe sets ${settings.label} (default = ${Object.values(PROBE_SETS)
      .filter((s) => s.default)
      .map((s) => s.name)
      .join(', ')}); ${runsDescription(settings)}, in ${settings.method === 'blocks' ? 'one run' : 'separate runs'} of ` +
      `pgbench -S -c ${settings.clients} -j ${Math.min(2, settings.clients)}, scale ${settings.scale}, ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster, version } = await prepareCluster(resources, settings, print);
  const measured = settings.method === 'blocks' ? await blocksMethod(cluster, settings) : await restartMethod(cluster, settings, resources);
  // The exact per-event cost comes from one more on-run with kernel.bpf_stats_enabled.
  const costRun = await onRun(cluster, settings, 0, resources.statsEnabledBefore, true);
  print(`cost run (bpf_stats on): ${costRun.tps.toFixed(0)} tps`);
  const summary = summarize(measured.throughput, costRun, settings.cores, measured.onRuns, measured.longLived);
  print();
  for (const line of humanReport(summary, settings)) print(line);
  print();
  for (const line of markdownRow(summary, settings)) print(line);
  const path = writeJson(settings, {
    at: new Date().toISOString(),
    kernel: release(),
    pgbench: version,
    settings,
    summary,
    ...measured.detail,
    costRun,
  });
  print();
  print(`results: ${path}`);
}

// Flags are parsed inside, so a bad one is a one-line error like any other.
runBenchmark('overhead', (resources) => benchmark(parseSettings(process.argv.slice(2)), resources));
