/*
 * Control-plane latency: how long a DBA waits between bpf_stats.collect()/stop() returning and
 * the sidecar reporting the probe set attached (running) or detached (stopped), and how close
 * a collection's end is to its requested duration. Times are taken by a client LISTENing on
 * bpf_stats_status, i.e. as a DBA would see them, not by the sidecar.
 *
 * Run: node dist/bench/control-latency.js [--rounds 20]
 * Needs root (BPF) and PostgreSQL's server binaries; the query set is the one attached.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { runBench } from './run-bench.js';

const print = (line = '') => process.stdout.write(`${line}\n`);

function quantiles(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return `median ${at(0.5).toFixed(1)} ms, p90 ${at(0.9).toFixed(1)} ms, max ${sorted[sorted.length - 1]!.toFixed(1)} ms`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ args: process.argv.slice(2), options: { rounds: { type: 'string', default: '20' } } });
  const rounds = Number(values.rounds);
  const cluster = await ThrowawayCluster.start();
  const sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 1000 });
  const dba = new pg.Client(cluster.connectionString());
  const watcher = new pg.Client(cluster.connectionString());
  try {
    await dba.connect();
    await watcher.connect();
    const waiting = new Map<string, (at: number) => void>();
    watcher.on('notification', (n) => {
      const { id, status } = JSON.parse(n.payload!);
      waiting.get(`${id}:${status}`)?.(performance.now());
    });
    await watcher.query('LISTEN bpf_stats_status');
    const next = (id: number, status: string) => new Promise<number>((resolve) => waiting.set(`${id}:${status}`, resolve));

    const attach: number[] = [];
    const detach: number[] = [];
    const overrun: number[] = [];
    for (let i = 0; i < rounds; i++) {
      // Odd rounds end by themselves after 1 s, even ones by stop().
      const timed = i % 2 === 1;
      const started = performance.now();
      const id = Number((await dba.query('SELECT bpf_stats.collect($1, $2) AS id', ['{query}', timed ? '1 s' : null])).rows[0].id);
      const running = next(id, 'running');
      const ended = next(id, timed ? 'done' : 'stopped');
      const runningAt = await running;
      attach.push(runningAt - started);
      if (timed) {
        overrun.push((await ended) - runningAt - 1000);
      } else {
        const stopping = performance.now();
        await dba.query('SELECT bpf_stats.stop($1)', [id]);
        detach.push((await ended) - stopping);
      }
    }
    print(`collect() -> running (query set attached): ${quantiles(attach)} over ${attach.length} requests`);
    print(`stop() -> stopped (detached):             ${quantiles(detach)} over ${detach.length} requests`);
    print(`end of a 1 s collection, after 1 s:       ${quantiles(overrun)} over ${overrun.length} requests`);
  } finally {
    await sidecar.stop();
    await dba.end().catch(() => undefined);
    await watcher.end().catch(() => undefined);
    await cluster.stop();
  }
}

runBench(main);
