/*
 * Idle cost: CPU per second of an idle cluster with and without the collector, in rotation.
 *
 * A throwaway cluster (nothing connects but this bench, twice per window) and `pg-bpf-stats run`
 * (default sets, --interval 1s) as an operator runs it. The cluster's processes and the collector
 * are put in one cpuacct cgroup (v1): cpuacct.usage counts every nanosecond they and the children
 * they fork later (autovacuum workers, ...) ran, exited ones included. The collector's own part is
 * its threads' /proc/<pid>/task/<tid>/schedstat. Each round: a window without the collector,
 * then one with it (after --warmup seconds, so start-up is left out). The cluster's transactions
 * (pg_stat_database.xact_commit, less the bench's own reads) show what the collector wrote.
 *
 * Run (root): node dist/bench/idle-cost.js [--seconds 60] [--rounds 2] [--warmup 10] [--interval 1s]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { clusterPids, CpuGroup, processCpuNs } from './cpu-group.js';
import { SidecarProcess } from './sidecar-process.js';
import { runBench } from './run-bench.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    seconds: { type: 'string', default: '60' },
    rounds: { type: 'string', default: '2' },
    warmup: { type: 'string', default: '10' },
    interval: { type: 'string', default: '1s' },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const warmup = Number(values.warmup);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Window {
  withCollector: boolean;
  totalMsPerS: number;
  collectorMsPerS: number;
  xactPerMin: number;
}

async function commits(dsn: string): Promise<number> {
  const client = new pg.Client(dsn);
  await client.connect();
  try {
    const { rows } = await client.query('SELECT sum(xact_commit)::int8 AS n FROM pg_stat_database');
    return Number(rows[0].n);
  } finally {
    await client.end();
  }
}

async function measure(group: CpuGroup, dsn: string, collector: SidecarProcess | null): Promise<Window> {
  const xact0 = await commits(dsn);
  const start = performance.now();
  const usage0 = group.usageNs();
  const own0 = collector ? processCpuNs(collector.pid) : 0;
  await sleep(seconds * 1000);
  const usage1 = group.usageNs();
  const own1 = collector ? processCpuNs(collector.pid) : 0;
  const elapsedS = (performance.now() - start) / 1000;
  // Less the bench's own read (one transaction per commits() call).
  const xact = (await commits(dsn)) - xact0 - 1;
  return {
    withCollector: collector !== null,
    totalMsPerS: (usage1 - usage0) / 1e6 / elapsedS,
    collectorMsPerS: (own1 - own0) / 1e6 / elapsedS,
    xactPerMin: (xact * 60) / elapsedS,
  };
}

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  const group = new CpuGroup();
  let sidecar: SidecarProcess | null = null;
  const stopAll = () => {
    sidecar?.killNow();
  };
  process.once('SIGINT', () => {
    stopAll();
    process.exit(130);
  });
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await admin.end();
    const postmaster = Number(readFileSync(`${cluster.dataDir}/postmaster.pid`, 'utf8').split('\n')[0]);
    for (const pid of clusterPids(postmaster)) group.add(pid);
    print(
      `idle cost: ${rounds} round(s) of ${seconds} s without, then with the collector (--interval ${values.interval}, ${warmup} s warm-up)`,
    );
    const windows: Window[] = [];
    for (let round = 1; round <= rounds; round++) {
      await sleep(warmup * 1000);
      const alone = await measure(group, cluster.connectionString(), null);
      print(`round ${round} cluster alone:   ${alone.totalMsPerS.toFixed(2)} ms CPU/s, ${alone.xactPerMin.toFixed(1)} transactions/min`);
      windows.push(alone);
      ({ sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, interval: values.interval }));
      group.add(sidecar.pid);
      // Backends the collector opened before it was moved into the group.
      for (const pid of clusterPids(postmaster)) group.add(pid);
      await sleep(warmup * 1000);
      const withIt = await measure(group, cluster.connectionString(), sidecar);
      print(
        `round ${round} with collector: ${withIt.totalMsPerS.toFixed(2)} ms CPU/s (collector ${withIt.collectorMsPerS.toFixed(2)}, ` +
          `cluster ${(withIt.totalMsPerS - withIt.collectorMsPerS).toFixed(2)}), ${withIt.xactPerMin.toFixed(1)} transactions/min`,
      );
      windows.push(withIt);
      const memory = sidecar.memoryMb();
      print(
        `round ${round} collector memory: RSS ${memory.rss.toFixed(1)} MB (private ${memory.anon.toFixed(1)}, file-backed ${memory.file.toFixed(1)})`,
      );
      await sidecar.stop();
      sidecar = null;
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const alone = windows.filter((w) => !w.withCollector);
    const on = windows.filter((w) => w.withCollector);
    const extra = mean(on.map((w) => w.totalMsPerS)) - mean(alone.map((w) => w.totalMsPerS));
    print();
    print('| | CPU ms per second | of which collector | transactions per minute |');
    print('| --- | ---: | ---: | ---: |');
    print(
      `| cluster alone | ${mean(alone.map((w) => w.totalMsPerS)).toFixed(2)} | - | ${mean(alone.map((w) => w.xactPerMin)).toFixed(1)} |`,
    );
    print(
      `| with collector | ${mean(on.map((w) => w.totalMsPerS)).toFixed(2)} | ${mean(on.map((w) => w.collectorMsPerS)).toFixed(2)} | ${mean(on.map((w) => w.xactPerMin)).toFixed(1)} |`,
    );
    print(`| **collector's extra** | **${extra.toFixed(2)}** | | |`);
  } finally {
    stopAll();
    await sidecar?.stop().catch(() => undefined);
    await cluster.stop();
    group.remove();
  }
}

runBench(main);
