/*
 * History size benchmark: does retention keep bpf_stats.*_history bounded under a sustained
 * workload?
 *
 * A throwaway cluster, the sidecar in this process with a short retention and partition width,
 * and a rate-limited pgbench (the built-in TPC-B-like script: 7 statements per transaction,
 * so ~7 query rows and a row per busy backend each flush) for a bounded time. Every --sample
 * seconds it prints the history tables' total size (all partitions, indexes included), their
 * rows and partitions, and the latest flush's duration from bpf_stats.health. With retention R
 * and width W the tables should hold between R and R + W of flushes once R + W has passed, so
 * the size plateaus instead of growing with time.
 *
 * Run: node dist/bench/history-size.js [--seconds 180] [--retention 60s] [--partition 15s]
 *        [--interval 1s] [--clients 4] [--rate 200] [--sample 10]
 * --retention off measures the flush without history, for comparing flush_ms.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseDuration } from '../src/cli/parse-duration.js';
import { parseRetention } from '../src/cli/parse-retention.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { initPgbench } from './pgbench.js';
import { runBench } from './run-bench.js';

const print = (line = '') => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    seconds: { type: 'string', default: '180' },
    retention: { type: 'string', default: '60s' },
    partition: { type: 'string', default: '15s' },
    interval: { type: 'string', default: '1s' },
    clients: { type: 'string', default: '4' },
    rate: { type: 'string', default: '200' },
    sample: { type: 'string', default: '10' },
  },
});
const seconds = parseDuration(values.seconds, '--seconds', { bareUnit: 's' }) / 1000;
const retentionMs = parseRetention(values.retention);
const partitionMs = parseDuration(values.partition, '--partition');
const intervalMs = parseDuration(values.interval, '--interval');
const sampleMs = parseDuration(values.sample, '--sample', { bareUnit: 's' });

interface Sample {
  t: number;
  bytes: number;
  rows: number;
  partitions: number;
  flushMs: number;
}

const SIZE_SQL = `
  SELECT coalesce(sum(pg_total_relation_size(relid)), 0) AS bytes,
         count(*) FILTER (WHERE isleaf) AS partitions
    FROM (SELECT * FROM pg_partition_tree('bpf_stats.query_stats_history')
          UNION ALL SELECT * FROM pg_partition_tree('bpf_stats.backend_stats_history')
          UNION ALL SELECT * FROM pg_partition_tree('bpf_stats.query_histogram_history')) p`;

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  let sidecar: Sidecar | null = null;
  const client = new pg.Client(cluster.connectionString());
  try {
    await client.connect();
    await initPgbench(cluster, 1);
    // The server's own timing of the sidecar's statements (the cluster preloads it).
    await client.query('CREATE EXTENSION pg_stat_statements');
    // History rows at every flush (not the default 5 min), so that a short run fills partitions.
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs,
      historyRetentionMs: retentionMs,
      historyPartitionMs: partitionMs,
      historyIntervalMs: intervalMs,
    });
    print(
      `history-size: ${seconds} s of pgbench -c ${values.clients} -R ${values.rate} (TPC-B-like), flush every ${intervalMs} ms, ` +
        `retention ${retentionMs === null ? 'off' : `${retentionMs / 1000} s`}, partitions ${sidecar ? partitionMs / 1000 : '?'} s`,
    );
    const load = cluster.exec(
      'pgbench',
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(cluster.port),
        '-U',
        'postgres',
        '-n',
        '-c',
        values.clients!,
        '-j',
        '2',
        '-R',
        values.rate!,
        '-T',
        String(seconds),
        'postgres',
      ],
      seconds * 1000 + 120_000,
    );
    const started = performance.now();
    const samples: Sample[] = [];
    print('   t s   history kB      rows  partitions  flush ms');
    let finished = false;
    void load.finally(() => (finished = true));
    while (!finished) {
      await new Promise((resolve) => setTimeout(resolve, sampleMs));
      const size = (await client.query(SIZE_SQL)).rows[0];
      const rows = (
        await client.query(
          'SELECT (SELECT count(*) FROM bpf_stats.query_stats_history) + (SELECT count(*) FROM bpf_stats.backend_stats_history) AS n',
        )
      ).rows[0];
      const health = (await client.query('SELECT flush_ms FROM bpf_stats.health WHERE pid = $1', [process.pid])).rows[0];
      const s = {
        t: (performance.now() - started) / 1000,
        bytes: Number(size.bytes),
        rows: Number(rows.n),
        partitions: Number(size.partitions),
        flushMs: health?.flush_ms ?? NaN,
      };
      samples.push(s);
      print(
        `${s.t.toFixed(0).padStart(6)}  ${(s.bytes / 1024).toFixed(0).padStart(10)}  ${String(s.rows).padStart(8)}  ${String(s.partitions).padStart(10)}  ${s.flushMs.toFixed(2).padStart(8)}`,
      );
    }
    await load;
    if (retentionMs !== null) {
      // Steady state: after retention + one partition, the tables hold at most that much.
      const steady = samples.filter((s) => s.t * 1000 >= retentionMs + partitionMs + sampleMs);
      if (steady.length) {
        const kb = steady.map((s) => s.bytes / 1024);
        print(
          `steady state (t >= ${((retentionMs + partitionMs + sampleMs) / 1000).toFixed(0)} s): history ${Math.min(...kb).toFixed(0)}–${Math.max(...kb).toFixed(0)} kB, ` +
            `rows ${Math.min(...steady.map((s) => s.rows))}–${Math.max(...steady.map((s) => s.rows))}; peak over the run ${(Math.max(...samples.map((s) => s.bytes)) / 1024).toFixed(0)} kB`,
        );
      }
    }
    await statementCosts(client);
    if (retentionMs !== null) await extrapolate(client, intervalMs);
    const flushMs = samples
      .map((s) => s.flushMs)
      .filter((v) => Number.isFinite(v))
      .sort((a, b) => a - b);
    if (flushMs.length)
      print(`flush_ms (sampled): median ${flushMs[Math.floor(flushMs.length / 2)]!.toFixed(2)}, max ${flushMs.at(-1)!.toFixed(2)}`);
  } finally {
    await sidecar?.stop();
    await client.end().catch(() => undefined);
    await cluster.stop();
  }
}

/** Server-side time per call of each bpf_stats statement the flushes ran (pg_stat_statements). */
async function statementCosts(client: pg.Client): Promise<void> {
  const { rows } = await client.query(`
    SELECT CASE WHEN query ~ '^\\s*WITH "before_' THEN 'history inserts + health upsert'
                WHEN query LIKE 'insert into "bpf_stats"."query_stats"%' THEN 'cumulative upsert, queries'
                WHEN query LIKE 'insert into "bpf_stats"."backend_stats"%' THEN 'cumulative upsert, backends'
                WHEN query ~ '^\\s*INSERT INTO bpf_stats.health' THEN 'health upsert (no history rows)'
                WHEN query LIKE '%maintain_history%' THEN 'retention (maintain_history)'
                ELSE 'start-up (capabilities, health row)' END AS statement,
           sum(calls) AS calls, sum(total_exec_time) / sum(calls) AS mean_ms, sum(rows)::float8 / sum(calls) AS rows_per_call
      FROM pg_stat_statements
     WHERE query ~* '^\\s*(with "before_|insert into "?bpf_stats|select .*maintain_history)'
     GROUP BY 1 ORDER BY 1`);
  print('statement                           calls   mean ms   rows/call');
  for (const r of rows) {
    print(
      `${String(r.statement).padEnd(33)} ${String(r.calls).padStart(7)}  ${Number(r.mean_ms).toFixed(3).padStart(8)}  ${Number(r.rows_per_call).toFixed(1).padStart(10)}`,
    );
  }
}

/**
 * Bytes per history row as stored now (heap and indexes of the partitions that hold rows, page
 * rounding included, so an upper bound for long partitions), and what the default retention
 * would hold at this run's rows per flush.
 */
async function extrapolate(client: pg.Client, intervalMs: number): Promise<void> {
  const { rows } = await client.query(`
    SELECT sum(pg_total_relation_size(relid)) AS bytes
      FROM (SELECT * FROM pg_partition_tree('bpf_stats.query_stats_history')
            UNION ALL SELECT * FROM pg_partition_tree('bpf_stats.backend_stats_history')) p
     WHERE isleaf AND pg_relation_size(relid) > 0`);
  const stored = Number(
    (
      await client.query(
        'SELECT (SELECT count(*) FROM bpf_stats.query_stats_history) + (SELECT count(*) FROM bpf_stats.backend_stats_history) AS n',
      )
    ).rows[0].n,
  );
  const health = (await client.query('SELECT rows_written, flushes FROM bpf_stats.health WHERE pid = $1', [process.pid])).rows[0];
  const perRow = Number(rows[0].bytes) / stored;
  const perFlush = Number(health.rows_written) / Number(health.flushes);
  const week = (perRow * perFlush * (7 * 86_400_000)) / intervalMs;
  print(
    `bytes per history row: ${perRow.toFixed(0)} (upper bound: page rounding of short partitions); rows per flush: ${perFlush.toFixed(1)}; ` +
      `the default 7 d retention at this rate and interval: ~${(week / 1e9).toFixed(2)} GB`,
  );
}

runBench(main);
