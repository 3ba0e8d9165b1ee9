/*
 * Overhead of each probe set, side by side: the cost table of docs/measured.md#cost-of-each-probe-set.
 *
 * One throwaway cluster; ROUNDS rounds, each with one pgbench -S run without the sidecar and
 * one run per variant (the default sets plus one opt-in set, or the defaults alone), in an
 * order that rotates from round to round so drift spreads evenly over the variants. A variant's
 * on/off ratio in a round is taken against that round's off run; the headline is the median
 * over rounds with a bootstrap interval. Then one cost run per variant with
 * kernel.bpf_stats_enabled=1 gives each program's exact ns/event and events/txn (stable where
 * TPS is not). pgbench -S fires the per-statement and scheduler probes; the rarer families
 * (locks, IO, reclaim) barely fire under it, so their ns/event comes from the tests' workloads.
 *
 * Run: node dist/bench/overhead-sets.js [--variants default,query,locks] [--rounds 6] [--seconds 8]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import { parseProbeSets, PROBE_SETS } from '../src/families/index.js';
import { packageRoot } from '../src/package-root.js';
import { LOAD_FLAGS, offRun, onRun, parseFlags, prepareCluster, roundSettings, runBenchmark, type Resources } from './overhead-runs.js';
import { humanReport, markdownRow, pairsThroughput, summarize, type BenchSettings, type OnRun, type PairResult } from './report.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const USAGE =
  'usage: node dist/bench/overhead-sets.js [--variants default,query,...] [--rounds 6] [--seconds 8] [--clients 8] [--scale 10]';

interface Variant {
  label: string;
  /** --probes for the sidecar; undefined = the default sets only. */
  probes: string | undefined;
}

function parse(argv: string[]): { variants: Variant[]; settings: BenchSettings } {
  const options = {
    variants: { type: 'string' },
    rounds: { type: 'string', default: '6' },
    ...LOAD_FLAGS,
    seconds: { type: 'string', default: '8' },
  } as const;
  const values = parseFlags(argv, options, USAGE);
  const optIn = Object.values(PROBE_SETS)
    .filter((s) => !s.default)
    .map((s) => s.name);
  const names = (values.variants ?? ['default', ...optIn].join(','))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const variants = names.map((name) => {
    if (name === 'default') return { label: 'default', probes: undefined };
    parseProbeSets(name); // one line for an unknown set, before any cluster starts
    return { label: `default+${name}`, probes: name };
  });
  return { variants, settings: roundSettings('sets', values) };
}

async function benchmark(variants: Variant[], settings: BenchSettings, resources: Resources): Promise<void> {
  print(
    `pg-bpf-stats overhead by probe set: ${variants.map((v) => v.label).join(', ')}; ${settings.pairs} rounds × ${settings.seconds} s ` +
      `of pgbench -S -c ${settings.clients}, scale ${settings.scale}, ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster, version } = await prepareCluster(resources, settings, print);
  const pairs = new Map<string, PairResult[]>(variants.map((v) => [v.label, []]));
  for (let round = 1; round <= settings.pairs; round++) {
    // Rotate: the off run and each variant take every position over the rounds.
    const slots: Array<Variant | null> = [null, ...variants];
    const shift = (round - 1) % slots.length;
    const order = [...slots.slice(shift), ...slots.slice(0, shift)];
    const ons = new Map<string, OnRun>();
    let off = null;
    for (const slot of order) {
      if (!slot) off = await offRun(cluster, settings, round);
      else ons.set(slot.label, await onRun(cluster, { ...settings, probes: slot.probes }, round, resources.statsEnabledBefore, false));
    }
    const cells = [`off ${off!.tps.toFixed(0)}`];
    for (const v of variants) {
      const on = ons.get(v.label)!;
      pairs.get(v.label)!.push({ pair: round, order: 'off,on', off: off!, on, ratio: on.tps / off!.tps });
      cells.push(`${v.label} ${(on.tps / off!.tps).toFixed(3)}`);
    }
    print(`round ${round}: ${cells.join(', ')} tps ratio`);
  }
  const rows: string[] = [];
  const results: Record<string, unknown> = {};
  for (const v of variants) {
    const costRun = await onRun(cluster, { ...settings, probes: v.probes }, 0, resources.statsEnabledBefore, true);
    const variantSettings = { ...settings, label: v.label, probes: v.probes };
    const variantPairs = pairs.get(v.label)!;
    const summary = summarize(
      pairsThroughput(variantPairs),
      costRun,
      settings.cores,
      variantPairs.map((p) => p.on),
    );
    print();
    for (const line of humanReport(summary, variantSettings)) print(line);
    const table = markdownRow(summary, variantSettings);
    if (!rows.length) rows.push(table[0]!, table[1]!);
    rows.push(table[2]!);
    results[v.label] = { summary, pairs: pairs.get(v.label), costRun };
  }
  print();
  for (const row of rows) print(row);
  const dir = join(packageRoot(), '.bench');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'overhead-sets.json');
  writeFileSync(
    path,
    `${JSON.stringify({ at: new Date().toISOString(), kernel: release(), pgbench: version, settings, results }, null, 2)}\n`,
  );
  print();
  print(`results: ${path}`);
}

// Flags are parsed inside, so a bad one is a one-line error like any other.
runBenchmark('overhead-sets', (resources) => {
  const { variants, settings } = parse(process.argv.slice(2));
  return benchmark(variants, settings, resources);
});
