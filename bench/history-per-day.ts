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
 * With --probes latency (statement latency histograms) it measures query_histogram_history the
 * same way, and what the same rows would take with all 256 buckets stored (a copy of them with
 * whole arrays, in a table of the same shape, TOAST compression included).
 *
 * Run (root): node dist/bench/history-per-day.js [--statements 1000] [--seconds 60] [--granule 5s] [--interval 1s] [--probes latency]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseDuration } from '../src/cli/parse-duration.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { runDistinctStatements } from './distinct-statements.js';
import { runBench } from './run-bench.js';
import type { ProbeSetName } from '../src/families/index.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    statements: { type: 'string', default: '1000' },
    seconds: { type: 'string', default: '60' },
    granule: { type: 'string', default: '5s' },
    interval: { type: 'string', default: '1s' },
    probes: { type: 'string', default: '' },
  },
});
const probeSets = (values.probes ? values.probes.split(',') : []) as ProbeSetName[];
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
      probeSets,
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
    const { rows: hist } = await client.query(`
      SELECT count(*) AS rows, count(DISTINCT ts) AS writes, coalesce(avg(cardinality(buckets)), 0) AS buckets,
             (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('bpf_stats.query_histogram_history')
               WHERE isleaf AND pg_relation_size(relid) > 0) AS bytes
        FROM bpf_stats.query_histogram_history`);
    const histRows = Number(hist[0].rows);
    if (histRows > 0) {
      // The same rows with every bucket: stored as query_histograms stores its counts.
      await client.query(`
        CREATE TEMP TABLE dense_histogram_history AS
        SELECT h.ts, h.node, h.userid, h.dbid, h.toplevel, h.queryid, h.kind,
               ARRAY(SELECT coalesce(d.count, 0) FROM generate_series(0, 255) AS b
                       LEFT JOIN unnest(h.buckets, h.counts) AS d(bucket, count) ON d.bucket = b ORDER BY b) AS counts,
               h.observations, h.max_so_far_ms
          FROM bpf_stats.query_histogram_history h`);
      await client.query('CREATE INDEX ON dense_histogram_history (queryid, ts)');
      const { rows: dense } = await client.query("SELECT pg_total_relation_size('dense_histogram_history') AS bytes");
      // What a report pays to read them: every row's buckets summed per statement and bucket, best of 3.
      const timed = async (text: string) => {
        let best = Infinity;
        for (let i = 0; i < 3; i++) {
          const started = performance.now();
          await client.query(text);
          best = Math.min(best, performance.now() - started);
        }
        return best;
      };
      const sparseReadMs = await timed(`SELECT h.queryid, u.bucket, sum(u.count) FROM bpf_stats.query_histogram_history h,
                                                unnest(h.buckets, h.counts) AS u(bucket, count) GROUP BY 1, 2`);
      const denseReadMs = await timed(`SELECT h.queryid, u.bucket, sum(u.count) FROM dense_histogram_history h,
                                               unnest(h.counts) WITH ORDINALITY AS u(count, bucket) WHERE u.count > 0 GROUP BY 1, 2`);
      const sparsePerRow = Number(hist[0].bytes) / histRows;
      const densePerRow = Number(dense[0].bytes) / histRows;
      const rowsPerWrite = histRows / Number(hist[0].writes);
      print();
      print(
        `histogram history: ${histRows} rows in ${hist[0].writes} writes (${rowsPerWrite.toFixed(0)} per write), ${Number(hist[0].buckets).toFixed(1)} non-zero buckets per row; ${sparsePerRow.toFixed(0)} B per row (indexes included), ${densePerRow.toFixed(0)} B with all 256 buckets`,
      );
      print(
        `summing every row per statement and bucket (what report does for its statements): ${sparseReadMs.toFixed(0)} ms, ${denseReadMs.toFixed(0)} ms with all 256 buckets`,
      );
      print(`| history interval | histogram rows per day | size per day | 7 days | 7 days, all 256 buckets |`);
      print('| --- | ---: | ---: | ---: | ---: |');
      for (const minutes of [1, 5, 15]) {
        const perDay = (1440 / minutes) * rowsPerWrite;
        print(
          `| ${minutes} min | ${Math.round(perDay).toLocaleString('en')} | ${((perDay * sparsePerRow) / 1e6).toFixed(0)} MB | ${((7 * perDay * sparsePerRow) / 1e9).toFixed(2)} GB | ${((7 * perDay * densePerRow) / 1e9).toFixed(2)} GB |`,
        );
      }
    }
  } finally {
    await sidecar?.stop();
    await client.end().catch(() => undefined);
    await cluster.stop();
  }
}

runBench(main);
