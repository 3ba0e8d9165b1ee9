/*
 * Interrupts the collector causes on the CPUs backends run on (issue 16, goal 3: the flush's
 * indirect cost). The collector maps and unmaps its large blocks (the addon fixes glibc's mmap
 * threshold), and an unmap sends TLB-shootdown interrupts to the other CPUs that ran its threads:
 * one suspect for what backends pay beyond the sidecar's own CPU when it flushes.
 *
 * pgbench -S at a fixed rate, in rotation every round: no collector, the collector with no flush
 * in the window (--interval 1h: its links alone), and with a flush every second. The TLB, CAL
 * (function call) and RES (rescheduling) lines of /proc/interrupts, summed over every CPU, are
 * compared per second and per transaction.
 *
 * Run (root): node dist/bench/flush-interrupts.js [--rounds 3] [--seconds 20] [--rate 3000] [--clients 4]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { initPgbench, runSelectOnly } from './pgbench.js';
import { median } from './report.js';
import { runBench } from './run-bench.js';
import { SidecarProcess } from './sidecar-process.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '20' },
    rate: { type: 'string', default: '3000' },
    clients: { type: 'string', default: '4' },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const rate = Number(values.rate);
const clients = Number(values.clients);

const KINDS = ['TLB', 'CAL', 'RES'] as const;
type Kind = (typeof KINDS)[number];

/** Each kind's count, summed over the CPUs. */
function interrupts(): Record<Kind, number> {
  const counts = { TLB: 0, CAL: 0, RES: 0 };
  for (const line of readFileSync('/proc/interrupts', 'utf8').split('\n')) {
    const match = /^\s*(TLB|CAL|RES):((?:\s+\d+)+)/.exec(line);
    if (match)
      counts[match[1] as Kind] = match[2]!
        .trim()
        .split(/\s+/)
        .reduce((sum, n) => sum + Number(n), 0);
  }
  return counts;
}

interface Window {
  perSecond: Record<Kind, number>;
  transactions: number;
}

async function measure(cluster: ThrowawayCluster): Promise<Window> {
  const before = interrupts();
  const { transactions } = await runSelectOnly(cluster, { clients, seconds, rate });
  const after = interrupts();
  const perSecond = Object.fromEntries(KINDS.map((k) => [k, (after[k] - before[k]) / seconds])) as Record<Kind, number>;
  return { perSecond, transactions };
}

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  try {
    await initPgbench(cluster, 10);
    const configurations = ['no collector', 'links alone (--interval 1h)', 'a flush every second'] as const;
    const windows = new Map<string, Window[]>(configurations.map((c) => [c, []]));
    print(`flush-interrupts: pgbench -S -R ${rate} -c ${clients}, ${seconds} s per window, ${rounds} round(s)`);
    for (let round = 1; round <= rounds; round++) {
      for (const configuration of configurations) {
        const interval = configuration === 'no collector' ? null : configuration === 'a flush every second' ? '1s' : '1h';
        const collector = interval
          ? (await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, interval })).sidecar
          : null;
        try {
          const window = await measure(cluster);
          windows.get(configuration)!.push(window);
          print(
            `round ${round} ${configuration.padEnd(28)} ${KINDS.map((k) => `${k} ${window.perSecond[k].toFixed(1)}/s`).join(', ')}; ${window.transactions} transactions`,
          );
        } finally {
          await collector?.stop();
        }
      }
    }
    print();
    print(`| configuration | ${KINDS.map((k) => `${k} per second (median)`).join(' | ')} | TLB per 1,000 transactions |`);
    print(`| --- | ${KINDS.map(() => '---:').join(' | ')} | ---: |`);
    for (const [configuration, list] of windows) {
      const tlbPerThousand = median(list.map((w) => (1000 * w.perSecond.TLB * seconds) / w.transactions));
      print(
        `| ${configuration} | ${KINDS.map((k) => median(list.map((w) => w.perSecond[k])).toFixed(1)).join(' | ')} | ${tlbPerThousand.toFixed(2)} |`,
      );
    }
  } finally {
    await cluster.stop();
  }
}

runBench(main);
