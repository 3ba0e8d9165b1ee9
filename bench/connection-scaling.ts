/*
 * Connection scaling: flush time and the collector's memory at 100 and 1,000 client connections
 * (issue 16's scaling table; flush-scaling.ts does the same by statements held).
 *
 * One throwaway cluster with room for the largest count. For each --connections count, in
 * ascending order (connections are opened as needed and kept):
 *  - flushes, with the sidecar in this process (default sets, flushes only when the bench asks;
 *    explicit flushes, which write every backend row that changed): after every connection ran
 *    one statement (the same text: one query key, N backend rows), after a tenth of them did, and
 *    after nothing ran. Each the median of --repeat, as Sidecar.flush() times them.
 *  - memory, with the collector as installed (the bundled CLI, --interval 1s) while every
 *    connection runs a statement each second for --seconds: its RSS at the end and its peak,
 *    and its CPU time meanwhile.
 *
 * Run (root): node dist/bench/connection-scaling.js [--connections 100,1000] [--repeat 5] [--seconds 20]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { runBench } from './run-bench.js';
import { SidecarProcess } from './sidecar-process.js';
import { flushOrThrow, timedFlushes } from './timed-flushes.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    connections: { type: 'string', default: '100,1000' },
    repeat: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '20' },
  },
});
const counts = values.connections
  .split(',')
  .map(Number)
  .sort((a, b) => a - b);
const repeat = Number(values.repeat);
const seconds = Number(values.seconds);
if (counts.some((n) => !Number.isInteger(n) || n < 1) || !(repeat >= 1) || !(seconds >= 1)) {
  throw new Error('usage: node dist/bench/connection-scaling.js [--connections 100,1000] [--repeat 5] [--seconds 20]');
}
/** Forks at a time while opening connections (the postmaster forks one backend per connection). */
const OPENING_BATCH = 50;
const STATEMENT = 'SELECT count(*) FROM pg_class WHERE relkind = $1';

interface Row {
  connections: number;
  allMs: number;
  allRows: number;
  tenthMs: number;
  tenthRows: number;
  noneMs: number;
  rssMb: number;
  peakRssMb: number;
  /** The collector's CPU over the memory phase, ms per second. */
  cpuMsPerS: number;
}

async function openUpTo(cluster: ThrowawayCluster, clients: pg.Client[], n: number): Promise<void> {
  while (clients.length < n) {
    const batch = Array.from({ length: Math.min(OPENING_BATCH, n - clients.length) }, () => new pg.Client(cluster.connectionString()));
    await Promise.all(batch.map((c) => c.connect()));
    clients.push(...batch);
  }
}

const runOn = (clients: readonly pg.Client[]) => Promise.all(clients.map((c) => c.query(STATEMENT, ['r'])));

async function flushTimes(
  cluster: ThrowawayCluster,
  clients: readonly pg.Client[],
): Promise<Pick<Row, 'allMs' | 'allRows' | 'tenthMs' | 'tenthRows' | 'noneMs'>> {
  const sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, control: false });
  try {
    const flush = () => flushOrThrow(sidecar);
    // Every backend gets its record and its first row before anything is timed.
    await runOn(clients);
    await flush();
    const timed = async (work: () => Promise<unknown>) => {
      const { ms, last } = await timedFlushes(repeat, work, flush);
      return { ms, rows: last.backends };
    };
    const all = await timed(() => runOn(clients));
    let next = 0;
    const tenth = Math.max(1, Math.round(clients.length / 10));
    const some = await timed(() => {
      const chosen = Array.from({ length: tenth }, (_, i) => clients[(next + i) % clients.length]!);
      next += tenth;
      return runOn(chosen);
    });
    const none = await timed(async () => undefined);
    return { allMs: all.ms, allRows: all.rows, tenthMs: some.ms, tenthRows: some.rows, noneMs: none.ms };
  } finally {
    await sidecar.stop();
  }
}

async function memory(cluster: ThrowawayCluster, clients: readonly pg.Client[]): Promise<Pick<Row, 'rssMb' | 'peakRssMb' | 'cpuMsPerS'>> {
  const { sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined });
  try {
    // Every connection runs its statement once a second.
    const { cpuMsPerS } = await sidecar.cpuUnderLoad(seconds, () => runOn(clients), 1000);
    return { rssMb: sidecar.rssMb(), peakRssMb: sidecar.peakRssMb(), cpuMsPerS };
  } finally {
    await sidecar.stop();
  }
}

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start({ settings: { max_connections: counts.at(-1)! + 30 } });
  const clients: pg.Client[] = [];
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    await admin.end();
    print(
      `connection-scaling: ${counts.join(', ')} connections; flushes median of ${repeat}; memory after ${seconds} s of a statement per connection per second`,
    );
    const rows: Row[] = [];
    for (const n of counts) {
      await openUpTo(cluster, clients, n);
      const flushes = await flushTimes(cluster, clients);
      const rss = await memory(cluster, clients);
      const row = { connections: n, ...flushes, ...rss };
      rows.push(row);
      print(JSON.stringify(row));
    }
    print();
    print(
      '| connections | flush, all ran (backend rows) ms | flush, a tenth ran (rows) ms | flush, none ran ms | collector RSS MB (peak) | collector CPU ms/s |',
    );
    print('| ---: | ---: | ---: | ---: | ---: | ---: |');
    for (const r of rows) {
      print(
        `| ${r.connections} | ${r.allMs.toFixed(1)} (${r.allRows}) | ${r.tenthMs.toFixed(1)} (${r.tenthRows}) | ${r.noneMs.toFixed(1)} | ${r.rssMb.toFixed(1)} (${r.peakRssMb.toFixed(1)}) | ${r.cpuMsPerS.toFixed(1)} |`,
      );
    }
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    await cluster.stop();
  }
}

runBench(main);
