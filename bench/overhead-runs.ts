import { availableParallelism } from 'node:os';
/*
 * The runs the overhead benchmarks are made of: pgbench -S without the sidecar, and with a
 * freshly started sidecar that has settled, measured from outside (TPS, the sidecar's CPU and
 * RSS from /proc, each collector program's run_time_ns/run_cnt from bpftool).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { UserError } from '../src/errors.js';
import { collectorPrograms, countCollectorNamed, listPrograms, programDeltas, readStatsEnabled, setStatsEnabled } from './bpf-stats.js';
import { initPgbench, pgbenchVersion, runSelectOnly } from './pgbench.js';
import type { BenchSettings, OffRun, OnRun } from './report.js';
import { SidecarProcess } from './sidecar-process.js';

/** The pgbench load flags every overhead bench takes, as parseArgs options. */
export const LOAD_FLAGS = {
  seconds: { type: 'string', default: '10' },
  clients: { type: 'string', default: '8' },
  scale: { type: 'string', default: '10' },
} as const;

/** The flags of the benches that take either throughput method (bench/alternating-blocks.ts). */
export const METHOD_FLAGS = {
  method: { type: 'string', default: 'blocks' },
  pairs: { type: 'string' },
  block: { type: 'string', default: '6' },
} as const;

/**
 * The method settings from METHOD_FLAGS' values: `--pairs` defaults to 60 on-blocks for the
 * blocks method and to `restartPairs` pairs of runs for the restart method.
 */
export function methodSettings(
  values: { method: string; pairs?: string; block: string },
  restartPairs: number,
  usage: string,
): Pick<BenchSettings, 'method' | 'pairs' | 'blockSeconds'> {
  const method = values.method;
  if (method !== 'blocks' && method !== 'restart') throw new UserError(`--method must be blocks or restart, got '${method}'\n${usage}`);
  return {
    method,
    pairs: positiveInteger(values.pairs ?? String(method === 'blocks' ? 60 : restartPairs), '--pairs'),
    blockSeconds: positiveInteger(values.block, '--block'),
  };
}

/** parseArgs, with a bad flag as a one-line UserError followed by the bench's usage. */
export function parseFlags<T extends NonNullable<ParseArgsConfig['options']>>(argv: string[], options: T, usage: string) {
  try {
    return parseArgs({ args: argv, options }).values;
  } catch (error) {
    throw new UserError(`${(error as Error).message}\n${usage}`);
  }
}

/** A flag's value as a positive integer, or a one-line UserError naming the flag. */
export function positiveInteger(text: string, flag: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value <= 0) throw new UserError(`${flag} must be a positive integer, got '${text}'`);
  return value;
}

/** BenchSettings of a bench that runs rounds of one pgbench load: LOAD_FLAGS' values and --rounds. */
export function roundSettings(label: string, values: { rounds: string; seconds: string; clients: string; scale: string }): BenchSettings {
  return {
    label,
    probes: undefined,
    pairs: positiveInteger(values.rounds, '--rounds'),
    seconds: positiveInteger(values.seconds, '--seconds'),
    clients: positiveInteger(values.clients, '--clients'),
    scale: positiveInteger(values.scale, '--scale'),
    cores: availableParallelism(),
  };
}

export const WARM_UP_SECONDS = 3;
/**
 * Every measured run, off or on, follows this much of the same load, so neither starts from an
 * idle machine (an on-run used to follow an idle settle and an off-run a busy one). For an
 * on-run these seconds are also the sidecar's settling: JIT, its first flushes.
 */
export const LEAD_IN_SECONDS = 2;

/** Everything that must be undone however the benchmark ends. */
export class Resources {
  cluster: ThrowawayCluster | null = null;
  /** kernel.bpf_stats_enabled as found, restored after each on-run and at the end. */
  readonly statsEnabledBefore = readStatsEnabled();
  private released: Promise<void> | null = null;

  release(): Promise<void> {
    this.released ??= (async () => {
      await Promise.all([...SidecarProcess.live].map((s) => s.stop(10_000)));
      await setStatsEnabled(this.statsEnabledBefore).catch(() => undefined);
      await this.cluster?.stop();
    })();
    return this.released;
  }
}

export async function offRun(cluster: ThrowawayCluster, settings: BenchSettings, pair: number): Promise<OffRun> {
  const otherCollectorPrograms = countCollectorNamed(await listPrograms());
  await runSelectOnly(cluster, { ...settings, seconds: LEAD_IN_SECONDS });
  const result = await runSelectOnly(cluster, settings);
  return { pair, mode: 'off', otherCollectorPrograms, ...result };
}

/** pgbench with the sidecar attached: the collector's programs and the sidecar process around the run. */
async function measureAttached(
  cluster: ThrowawayCluster,
  settings: BenchSettings,
  sidecar: SidecarProcess,
  preexisting: ReadonlySet<number>,
): Promise<Omit<OnRun, 'pair' | 'mode' | 'attachMs' | 'otherCollectorPrograms'>> {
  const owned = sidecar.programIds();
  const programsBefore = collectorPrograms(await listPrograms(), preexisting, owned);
  if (programsBefore.length === 0) throw new Error(`no collector programs loaded after attaching:\n${sidecar.log()}`);
  const cpuBefore = sidecar.cpuSeconds();
  const result = await runSelectOnly(cluster, settings);
  const programsAfter = collectorPrograms(await listPrograms(), preexisting, owned);
  if (!sidecar.running) throw new Error(`sidecar exited (${sidecar.exitDescription()}) during the pgbench run:\n${sidecar.log()}`);
  const cpuAfter = sidecar.cpuSeconds();
  return {
    ...result,
    sidecarCpuSeconds: cpuAfter,
    sidecarCpuSecondsDuringRun: cpuAfter - cpuBefore,
    peakRssMb: sidecar.peakRssMb(),
    programs: programDeltas(programsBefore, programsAfter),
  };
}

/**
 * Starts the sidecar, waits until it has attached and settled, measures one pgbench run, and
 * stops it with SIGTERM, which must end in exit code 0. Only programs loaded after the spawn
 * count as the collector's. With `withStats`, kernel.bpf_stats_enabled times every program run;
 * that timing costs something itself, so throughput pairs run without it.
 */
export async function onRun(
  cluster: ThrowawayCluster,
  settings: BenchSettings,
  pair: number,
  statsEnabledBefore: string,
  withStats: boolean,
): Promise<OnRun> {
  if (withStats) await setStatsEnabled('1');
  try {
    const loaded = await listPrograms();
    const preexisting = new Set(loaded.map((p) => p.id));
    const { sidecar, attachMs } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: settings.probes });
    let measured;
    try {
      // A collector runs for days: its start-up (JIT, first flush of every backend) is not
      // part of the steady state this run measures.
      await runSelectOnly(cluster, { ...settings, seconds: LEAD_IN_SECONDS });
      measured = await measureAttached(cluster, settings, sidecar, preexisting);
    } catch (error) {
      await sidecar.stop();
      throw error;
    }
    const code = await sidecar.stop();
    if (code !== 0) throw new Error(`sidecar exited with ${sidecar.exitDescription()} after SIGTERM:\n${sidecar.log()}`);
    return { pair, mode: 'on', attachMs, otherCollectorPrograms: countCollectorNamed(loaded), ...measured };
  } finally {
    if (withStats) await setStatsEnabled(statsEnabledBefore);
  }
}

export async function prepareCluster(
  resources: Resources,
  settings: BenchSettings,
  print: (line: string) => void,
): Promise<{ cluster: ThrowawayCluster; version: string }> {
  // Room for every client and the collector's connections (the default is 100).
  const cluster = await ThrowawayCluster.start({ settings: { max_connections: Math.max(100, settings.clients + 20) } });
  resources.cluster = cluster;
  const version = await pgbenchVersion(cluster);
  print(`cluster on port ${cluster.port} (${version}); pgbench -i -s ${settings.scale}`);
  await initPgbench(cluster, settings.scale);
  const warmUp = await runSelectOnly(cluster, { ...settings, seconds: WARM_UP_SECONDS });
  print(`warm-up: ${warmUp.tps.toFixed(0)} tps over ${WARM_UP_SECONDS} s`);
  return { cluster, version };
}

/**
 * Runs a benchmark to its end and exits: clusters and sidecars are released however it ends
 * (Ctrl-C included, exit 130); bad flags are one line, anything else keeps its stack.
 *
 * @example
 * runBenchmark('overhead', (resources) => benchmark(settings, resources));
 */
export function runBenchmark(name: string, body: (resources: Resources) => Promise<void>): void {
  const main = async () => {
    const resources = new Resources();
    const onSignal = (signal: NodeJS.Signals) => {
      process.stderr.write(`${name}: ${signal}, cleaning up\n`);
      void resources.release().finally(() => process.exit(130));
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    // If we die anyway, do not leave a sidecar attached to nothing.
    process.once('exit', () => {
      for (const s of SidecarProcess.live) s.killNow();
    });
    try {
      await body(resources);
    } finally {
      await resources.release();
    }
  };
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      const text = error instanceof UserError ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error);
      process.stderr.write(`${name}: ${text}\n`);
      process.exit(1);
    },
  );
}
