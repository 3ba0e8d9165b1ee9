/*
 * The default sets' cost per context switch, A/B between builds: on_sched_switch's exact BPF
 * nanoseconds per run (kernel.bpf_stats_enabled=1, bpftool's run_time_ns / run_cnt) under
 * pgbench -S, for two or more package trees (e.g. this one and a worktree of an older commit,
 * each built with npm run build), alternated run by run in an order that rotates each round so
 * drift on a shared machine spreads over all of them. TPS is not the figure here (it swings
 * ±10% between identical runs); the per-run nanoseconds are.
 *
 * With --builtin tpcb-like the statements sleep too (row locks, WAL flushes at commit), so the
 * switch-outs that end a sleep in a wait event, not only the wait for the client, are measured.
 *
 * Run: node dist/bench/switch-cost.js --builds before=/path/to/old/tree,after=. [--rounds 8] [--seconds 6] [--builtin tpcb-like]
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { release } from 'node:os';
import { UserError } from '../src/errors.js';
import { packageRoot } from '../src/package-root.js';
import { listPrograms, readStatsEnabled, setStatsEnabled } from './bpf-stats.js';
import { LEAD_IN_SECONDS, LOAD_FLAGS, parseFlags, prepareCluster, roundSettings, runBenchmark } from './overhead-runs.js';
import { type Builtin, parseBuiltin, runLoad } from './pgbench.js';
import { median, type BenchSettings } from './report.js';
import { SidecarProcess } from './sidecar-process.js';
import { KernelFeatures } from '../src/collector/kernel-features.js';
import { SWITCH_PROGRAMS, switchProgram } from '../src/collector/switch-program.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const USAGE =
  'usage: node dist/bench/switch-cost.js --builds LABEL=DIR,LABEL=DIR [--rounds 8] [--seconds 6] [--clients 8] [--scale 10] [--builtin select-only|tpcb-like]';
/** The switch-out program this kernel runs (src/collector/switch-program.ts); a build may run the other (SWITCH_PROGRAMS), measured the same. */
const PROGRAM = switchProgram(KernelFeatures.host());

interface Build {
  label: string;
  cli: string;
}

/** A tree's installed CLI (package.json's bin), built. */
function buildAt(label: string, dir: string): Build {
  const root = resolve(dir);
  const manifest = join(root, 'package.json');
  if (!existsSync(manifest)) throw new UserError(`--builds: ${root} has no package.json`);
  const bin = (JSON.parse(readFileSync(manifest, 'utf8')) as { bin: Record<string, string> }).bin['pg-bpf-stats'];
  const cli = bin && join(root, bin);
  if (!cli || !existsSync(cli)) throw new UserError(`--builds: ${root} is not built (run npm run build there)`);
  return { label, cli };
}

function parse(argv: string[]): { builds: Build[]; settings: BenchSettings; builtin: Builtin } {
  const values = parseFlags(
    argv,
    {
      builds: { type: 'string' },
      rounds: { type: 'string', default: '8' },
      ...LOAD_FLAGS,
      seconds: { type: 'string', default: '6' },
      builtin: { type: 'string', default: 'select-only' },
    },
    USAGE,
  );
  const builtin = parseBuiltin(values.builtin);
  const builds = (values.builds ?? `this=${packageRoot()}`).split(',').map((spec) => {
    const [label, dir] = spec.split('=');
    if (!label || !dir) throw new UserError(`--builds: expected LABEL=DIR, not ${JSON.stringify(spec)}`);
    return buildAt(label, dir);
  });
  return { builds, builtin, settings: roundSettings('switch-cost', values) };
}

interface Run {
  round: number;
  label: string;
  nsPerEvent: number;
  eventsPerTxn: number;
  tps: number;
}

/** One run: the lead-in, then on_sched_switch's counters around the measured pgbench, with kernel.bpf_stats_enabled on. */
async function measure(
  round: number,
  label: string,
  sidecar: SidecarProcess,
  pgbench: () => Promise<{ tps: number; transactions: number }>,
  leadIn: () => Promise<void>,
): Promise<Run> {
  await leadIn();
  await setStatsEnabled('1');
  const owned = sidecar.programIds();
  const read = async () => (await listPrograms()).filter((p) => (SWITCH_PROGRAMS as readonly string[]).includes(p.name) && owned.has(p.id));
  const before = await read();
  if (before.length !== 1)
    throw new Error(
      `expected one switch-out program (${SWITCH_PROGRAMS.join(' or ')}) of the sidecar, found ${before.length}:\n${sidecar.log()}`,
    );
  const result = await pgbench();
  const after = (await read())[0]!;
  const count = after.runCnt - before[0]!.runCnt;
  return {
    round,
    label,
    nsPerEvent: (after.runTimeNs - before[0]!.runTimeNs) / count,
    eventsPerTxn: count / result.transactions,
    tps: result.tps,
  };
}

runBenchmark('switch-cost', async (resources) => {
  const { builds, settings, builtin } = parse(process.argv.slice(2));
  print(
    `${PROGRAM} ns/event by build: ${builds.map((b) => b.label).join(', ')}; ${settings.pairs} rounds × ${settings.seconds} s of ` +
      `pgbench -b ${builtin} -c ${settings.clients}, scale ${settings.scale}, ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster, version } = await prepareCluster(resources, settings, print);
  const pgbench = (seconds: number) => runLoad(cluster, builtin, settings.clients, seconds);
  const statsBefore = readStatsEnabled();
  const runs: Run[] = [];
  for (let round = 1; round <= settings.pairs; round++) {
    const shift = (round - 1) % builds.length;
    for (const build of [...builds.slice(shift), ...builds.slice(0, shift)]) {
      const { sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, cli: build.cli });
      let run: Run;
      try {
        run = await measure(
          round,
          build.label,
          sidecar,
          () => pgbench(settings.seconds),
          async () => {
            await pgbench(LEAD_IN_SECONDS);
          },
        );
      } finally {
        await setStatsEnabled(statsBefore);
        const code = await sidecar.stop();
        if (code !== 0) print(`${build.label}: sidecar exited with ${sidecar.exitDescription()} after SIGTERM`);
      }
      runs.push(run);
      print(
        `round ${round} ${build.label.padEnd(12)} ${run.nsPerEvent.toFixed(0).padStart(5)} ns/event  ${run.eventsPerTxn.toFixed(2)} events/txn  ${run.tps.toFixed(0)} tps`,
      );
    }
  }
  print();
  print(`${version}; median over ${settings.pairs} rounds (min–max), and the median of each round's difference to ${builds[0]!.label}:`);
  for (const build of builds) {
    const mine = runs.filter((r) => r.label === build.label);
    const ns = mine.map((r) => r.nsPerEvent);
    const diffs = mine.map((r) => r.nsPerEvent - runs.find((o) => o.round === r.round && o.label === builds[0]!.label)!.nsPerEvent);
    print(
      `  ${build.label.padEnd(12)} ${median(ns).toFixed(0)} ns/event (${Math.min(...ns).toFixed(0)}–${Math.max(...ns).toFixed(0)}), ` +
        `${median(mine.map((r) => r.eventsPerTxn)).toFixed(2)} events/txn` +
        (build === builds[0] ? '' : `, per round ${median(diffs) >= 0 ? '+' : ''}${median(diffs).toFixed(0)} ns`),
    );
  }
});
