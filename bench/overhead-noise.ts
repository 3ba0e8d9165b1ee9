/*
 * The noise floor of the overhead benchmark: bench/overhead.ts's method with nothing to
 * measure, so its ratios would all be 1.000 on a quiet machine. Their median and 95% interval
 * say how far overhead.ts's on/off median can stray on this host with no collector at all, and
 * so how small an overhead that bench can resolve here.
 *  - blocks (default): the same long pgbench run and switching schedule, with no sidecar; the
 *    "on" blocks are simply the ones a sidecar would have collected in.
 *  - restart: PAIRS pairs of separate runs, both without the sidecar, each after the same
 *    lead-in load; the ratio is second/first.
 *
 * Run: node dist/bench/overhead-noise.js [--method blocks|restart] [--pairs 60] [--block 6] [--seconds 10] [--clients 8] [--scale 10]
 */
import { availableParallelism, release } from 'node:os';
import { benchSchedule, runAlternating } from './alternating-blocks.js';
import {
  LOAD_FLAGS,
  METHOD_FLAGS,
  methodSettings,
  offRun,
  parseFlags,
  positiveInteger,
  prepareCluster,
  runBenchmark,
  type Resources,
} from './overhead-runs.js';
import { bootstrapMedianInterval, median, runsDescription, type BenchSettings } from './report.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const USAGE =
  'usage: node dist/bench/overhead-noise.js [--method blocks|restart] [--pairs 60] [--block 6] [--seconds 10] [--clients 8] [--scale 10]';

function parseSettings(argv: string[]): BenchSettings {
  const values = parseFlags(argv, { ...METHOD_FLAGS, ...LOAD_FLAGS } as const, USAGE);
  return {
    label: 'noise',
    probes: undefined,
    ...methodSettings(values, 12, USAGE),
    seconds: positiveInteger(values.seconds, '--seconds'),
    clients: positiveInteger(values.clients, '--clients'),
    scale: positiveInteger(values.scale, '--scale'),
    cores: availableParallelism(),
  };
}

async function benchmark(settings: BenchSettings, resources: Resources): Promise<void> {
  print(
    `pg-bpf-stats overhead noise floor (${settings.method}): ${runsDescription(settings)} of pgbench -S -c ${settings.clients}, no sidecar at all; ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster } = await prepareCluster(resources, settings, print);
  const ratios: number[] = [];
  if (settings.method === 'blocks') {
    const run = await runAlternating(
      cluster,
      benchSchedule(settings, () => undefined),
    );
    for (const [i, r] of run.ratios.entries()) {
      ratios.push(r.ratio);
      print(`"on"-block ${i + 1}: ${r.tpsOn.toFixed(0)} tps, around it ${r.tpsOff.toFixed(0)} tps, ratio ${r.ratio.toFixed(3)}`);
    }
  } else {
    for (let pair = 1; pair <= settings.pairs; pair++) {
      const first = await offRun(cluster, settings, pair);
      const second = await offRun(cluster, settings, pair);
      ratios.push(second.tps / first.tps);
      print(`pair ${pair}: ${first.tps.toFixed(0)} then ${second.tps.toFixed(0)} tps, ratio ${ratios.at(-1)!.toFixed(3)}`);
    }
  }
  const { ratioMedianLow, ratioMedianHigh } = bootstrapMedianInterval(ratios);
  print();
  print(
    `ratio with nothing attached: median ${median(ratios).toFixed(3)}, 95% interval ${ratioMedianLow.toFixed(3)}–${ratioMedianHigh.toFixed(3)}, min ${Math.min(...ratios).toFixed(3)}, max ${Math.max(...ratios).toFixed(3)}`,
  );
}

// Flags are parsed inside, so a bad one is a one-line error like any other.
runBenchmark('overhead-noise', (resources) => benchmark(parseSettings(process.argv.slice(2)), resources));
