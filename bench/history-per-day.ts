/*
 * History size per day for a given number of active statements.
 *
 * A throwaway cluster and the sidecar in this process (default sets, flush every --interval,
 * history rows every --granule). One session runs --statements distinct statements (distinct
 * query ids) over and over, so every one of them is active in every history interval, for
 * --seconds. Then it measures what the history tables really hold: rows, and bytes (heap,
 * TOAST and indexes of the partitions with rows, pg_total_relation_size), so bytes per row; and
 * rows per history write. A day at a history interval I holds 86400/I writes of that many rows:
 * the bench prints the size per day and for the default 7-day retention at 1 and 5 minutes.
 *
 * Run (root): node dist/bench/history-per-day.js [--statements 1000] [--seconds 60] [--granule 5s] [--interval 1s]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseDuration } from '../src/cli/parse-duration.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { runDistinctStatements } from './distinct-statements.js';
import { runBench } from './run-bench.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    statements: { type: 'string', default: '1000' },
    seconds: { type: 'string', default: '60' },
    granule: { type: 'string', default: '5s' },
    interval: { type: 'string', default: '1s' },
  },
});
const statements = Number(values.statements);
const seconds = Number(values.seconds);
const granuleMs = parseDuration(values.granule!, '--granule');
const intervalMs = parseDuration(values.interval!, '--interval');

const LEAVES = `
  SELECT relid FROM pg_partition_tree('bpf_stats.query_stats_history') WHERE isleaf
  UNION ALL SELECT relid FROM pg_partition_tree('bpf_stats.backend_stats_history') WHERE isleaf`;

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  let sidecar: Sidecar | null = null;
  const client = new pg.Client(cluster.connectionString());
  try {
    await client.connect();
    // One-day partitions: the rows land in one or two of them, as in production.
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs,
      historyIntervalMs: granuleMs,
      control: false,
    });
    print(
      `history-per-day: ${statements} distinct statements, all active in every interval, ${seconds} s, flush every ${intervalMs} ms, history every ${granuleMs} ms`,
    );
    const started = performance.now();
    let round = 0;
    while (performance.now() - started < seconds * 1000) {
      await runDistinctStatements(client, statements, statements);
      round++;
    }
    await sidecar.stop();
    sidecar = null;
    const { rows: counts } = await client.query(`
      SELECT (SELECT count(*) FROM bpf_stats.query_stats_history) AS queries,
             (SELECT count(*) FROM bpf_stats.backend_stats_history) AS backends,
             (SELECT count(DISTINCT ts) FROM bpf_stats.query_stats_history) AS writes,
             (SELECT sum(pg_total_relation_size(relid)) FROM (${LEAVES}) l WHERE pg_relation_size(relid) > 0) AS bytes`);
    const { queries, backends, writes, bytes } = counts[0];
    const rows = Number(queries) + Number(backends);
    const perRow = Number(bytes) / rows;
    const queryRowsPerWrite = Number(queries) / Number(writes);
    const backendRowsPerWrite = Number(backends) / Number(writes);
    print(
      `${round} rounds of all statements; history: ${queries} query rows + ${backends} backend rows in ${writes} writes, ${(Number(bytes) / 1e6).toFixed(1)} MB, ${perRow.toFixed(0)} B per row (indexes included)`,
    );
    print(`per write: ${queryRowsPerWrite.toFixed(0)} query rows, ${backendRowsPerWrite.toFixed(1)} backend rows`);
    print();
    print(`| history interval | rows per day (${statements} statements) | size per day | 7 days |`);
    print('| --- | ---: | ---: | ---: |');
    for (const minutes of [1, 5, 15]) {
      const writesPerDay = 1440 / minutes;
      // The backend rows scale with processes, not statements: as measured here (one session plus background processes).
      const perDay = writesPerDay * (statements + backendRowsPerWrite);
      print(
        `| ${minutes} min | ${Math.round(perDay).toLocaleString('en')} | ${((perDay * perRow) / 1e6).toFixed(0)} MB | ${((7 * perDay * perRow) / 1e9).toFixed(2)} GB |`,
      );
    }
  } finally {
    await sidecar?.stop();
    await client.end().catch(() => undefined);
    await cluster.stop();
  }
}

runBench(main);
