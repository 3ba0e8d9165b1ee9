import type { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { UserError } from '../src/errors.js';

/** What one pgbench run reports. */
export interface PgbenchResult {
  tps: number;
  transactions: number;
}

/** A select-only pgbench run at saturation (pgbench -S -n -c C -j J -T S). */
export interface SelectOnlyRun {
  clients: number;
  seconds: number;
  /** Transactions per second to hold (pgbench -R); absent: as fast as it can. */
  rate?: number;
}

/*
 * pgbench 14+ prints "tps = N (without initial connection time)"; 13 and older print an
 * "including connections establishing" and an "excluding connections establishing" line.
 * The first pattern that matches wins, so the figure never includes connection setup when
 * the output has one that does not.
 */
const TPS_PATTERNS = [
  /^tps = ([\d.]+) \(without initial connection time\)/m,
  /^tps = ([\d.]+) \(excluding connections establishing\)/m,
  /^tps = ([\d.]+)/m,
];
const TRANSACTIONS_PATTERN = /^number of transactions actually processed: (\d+)/m;

/**
 * Parses pgbench's summary.
 *
 * @example
 * parsePgbenchOutput('number of transactions actually processed: 500\ntps = 49.9 (without initial connection time)\n');
 * // { tps: 49.9, transactions: 500 }
 */
export function parsePgbenchOutput(output: string): PgbenchResult {
  const tps = TPS_PATTERNS.map((p) => p.exec(output)?.[1]).find((m) => m !== undefined);
  const transactions = TRANSACTIONS_PATTERN.exec(output)?.[1];
  if (tps === undefined || transactions === undefined) {
    throw new Error(`cannot parse pgbench output:\n${output.trim()}`);
  }
  return { tps: Number(tps), transactions: Number(transactions) };
}

function connectionArgs(cluster: ThrowawayCluster): string[] {
  return ['-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres'];
}

/** Creates and fills the pgbench tables (pgbench -i -q -s SCALE). */
export async function initPgbench(cluster: ThrowawayCluster, scale: number): Promise<void> {
  await cluster.exec('pgbench', [...connectionArgs(cluster), '-i', '-q', '-s', String(scale), 'postgres'], 600_000);
}

/** Runs pgbench -S (select only) without vacuum, and parses its summary. */
export async function runSelectOnly(cluster: ThrowawayCluster, run: SelectOnlyRun): Promise<PgbenchResult> {
  const threads = Math.min(2, run.clients);
  const args = [
    '-S',
    '-n',
    '-c',
    String(run.clients),
    '-j',
    String(threads),
    '-T',
    String(run.seconds),
    ...(run.rate ? ['-R', String(run.rate)] : []),
  ];
  const { stdout } = await cluster.exec('pgbench', [...connectionArgs(cluster), ...args, 'postgres'], run.seconds * 1000 + 120_000);
  return parsePgbenchOutput(stdout);
}

/** One line of pgbench -P 1 --progress-timestamp: the second that ended at `at` (Unix seconds). */
export interface ProgressSample {
  at: number;
  tps: number;
}

const PROGRESS_PATTERN = /^progress: ([\d.]+) s, ([\d.]+) tps/gm;

/**
 * The progress lines of pgbench -P 1 --progress-timestamp.
 *
 * @example
 * parseProgress('progress: 1700000001.000 s, 41000.5 tps, lat 0.195 ms stddev 0.06, 0 failed\n');
 * // [{ at: 1700000001, tps: 41000.5 }]
 */
export function parseProgress(output: string): ProgressSample[] {
  return [...output.matchAll(PROGRESS_PATTERN)].map((m) => ({ at: Number(m[1]), tps: Number(m[2]) }));
}

/** runSelectOnly with a progress line every second (pgbench prints them on stderr). */
export async function runSelectOnlyWithProgress(
  cluster: ThrowawayCluster,
  run: SelectOnlyRun,
): Promise<PgbenchResult & { samples: ProgressSample[] }> {
  const threads = Math.min(2, run.clients);
  const args = ['-S', '-n', '-c', String(run.clients), '-j', String(threads), '-T', String(run.seconds), '-P', '1', '--progress-timestamp'];
  const { stdout, stderr } = await cluster.exec('pgbench', [...connectionArgs(cluster), ...args, 'postgres'], run.seconds * 1000 + 120_000);
  return { ...parsePgbenchOutput(stdout), samples: parseProgress(stderr) };
}

/** "pgbench (PostgreSQL) 15.18 ..." */
export async function pgbenchVersion(cluster: ThrowawayCluster): Promise<string> {
  return (await cluster.exec('pgbench', ['--version'])).stdout.trim();
}

/** A built-in pgbench script other than -S (tpcb-like, simple-update), without vacuum, at saturation. */
export async function runBuiltin(cluster: ThrowawayCluster, builtin: string, clients: number, seconds: number): Promise<PgbenchResult> {
  const args = ['-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', '-b', builtin, '-n', '-c', String(clients)];
  args.push('-j', String(Math.min(2, clients)), '-T', String(seconds), 'postgres');
  const { stdout } = await cluster.exec('pgbench', args, seconds * 1000 + 120_000);
  return parsePgbenchOutput(stdout);
}

/** The loads the switch benches take (--builtin): pgbench -S, or a built-in script that also sleeps in locks and WAL flushes. */
export const BUILTINS = ['select-only', 'tpcb-like'] as const;
export type Builtin = (typeof BUILTINS)[number];

/** --builtin's value, or a one-line UserError. */
export function parseBuiltin(value: string | undefined): Builtin {
  const builtin = BUILTINS.find((b) => b === value);
  if (!builtin) throw new UserError(`--builtin: expected one of ${BUILTINS.join(', ')}, not ${JSON.stringify(value)}`);
  return builtin;
}

/** One saturated run of `builtin` for `seconds`. */
export function runLoad(cluster: ThrowawayCluster, builtin: Builtin, clients: number, seconds: number): Promise<PgbenchResult> {
  return builtin === 'select-only' ? runSelectOnly(cluster, { clients, seconds }) : runBuiltin(cluster, builtin, clients, seconds);
}
