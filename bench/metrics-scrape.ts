/*
 * Does scraping /metrics slow the flush? The collector runs in this process with the Prometheus
 * exporter attached, under a steady pgbench -S load plus a few hundred distinct statements (so
 * the exporter keeps hundreds of statements and exports its top 100: thousands of series). In
 * alternating phases a separate curl process scrapes /metrics every second, or nothing does; each
 * flush's duration (Sidecar.lastFlush.ms: reading the maps, preparing, and the write round trip,
 * the superset of bpf_stats.health.flush_ms) is compared between the two.
 *
 *   node dist/bench/metrics-scrape.js [--phase-seconds 20] [--rounds 2] [--clients 2]
 */
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { PrometheusExporter } from '../src/exporters/prometheus/prometheus-exporter.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { initPgbench, runSelectOnly } from './pgbench.js';
import { median } from './report.js';

const { values } = parseArgs({ options: { 'phase-seconds': { type: 'string' }, rounds: { type: 'string' }, clients: { type: 'string' } } });
const phaseSeconds = Number(values['phase-seconds'] ?? 20);
const rounds = Number(values.rounds ?? 2);
const clients = Number(values.clients ?? 2);

function p95(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(0.95 * s.length))]!;
}

const cluster = await ThrowawayCluster.start();
let sidecar: Sidecar | null = null;
let exporter: PrometheusExporter | null = null;
try {
  await initPgbench(cluster, 10);
  exporter = await PrometheusExporter.listen({
    address: { host: '127.0.0.1', port: 0 },
    connectionString: cluster.connectionString(),
    log: () => undefined,
    top: 100,
  });
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 1000,
    probeSets: ['latency', 'sched'],
    historyRetentionMs: null,
    control: false,
  });
  exporter.attach(sidecar);
  let flushes: number[] = [];
  sidecar.onFlush((r) => {
    if (!r.error) flushes.push(r.ms);
  });
  // Many distinct statements (pg_stat_statements' query ids ignore constants and aliases; a
  // longer target list is another statement): the exporter keeps them all, exports the top 100.
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  for (let i = 0; i < 400; i++)
    await client.query(`SELECT ${Array.from({ length: i + 1 }, () => 'x').join(', ')} FROM generate_series(1, 2000) AS x`);
  await client.end();
  const url = `http://127.0.0.1:${exporter.address.port}/metrics`;

  const load = runSelectOnly(cluster, { clients, seconds: Math.ceil(phaseSeconds * 2 * rounds + 10) });
  // Warm-up: the first flushes after start are slower (new rows, names, partitions).
  await new Promise((r) => setTimeout(r, 15_000));
  const results: Record<'off' | 'on', number[]> = { off: [], on: [] };
  const scrapes: number[] = [];
  let bytes = 0;
  for (let round = 0; round < rounds; round++) {
    for (const mode of ['off', 'on'] as const) {
      flushes = [];
      let scraper = null;
      if (mode === 'on') {
        scraper = spawn('sh', ['-c', `while :; do curl -s -o /dev/null -w '%{time_total} %{size_download}\\n' ${url}; sleep 1; done`], {
          stdio: ['ignore', 'pipe', 'ignore'],
        });
        scraper.stdout.on('data', (d: Buffer) => {
          for (const line of d.toString().trim().split('\n')) {
            const [t, size] = line.split(' ');
            scrapes.push(Number(t) * 1000);
            bytes = Number(size);
          }
        });
      }
      await new Promise((r) => setTimeout(r, phaseSeconds * 1000));
      scraper?.kill();
      results[mode].push(...flushes);
      console.log(
        `round ${round + 1} scrape ${mode}: ${flushes.length} flushes, median ${median(flushes).toFixed(2)} ms, p95 ${p95(flushes).toFixed(2)} ms`,
      );
    }
  }
  const tps = await load;
  const series = (await (await fetch(url)).text()).split('\n').filter((l) => l && !l.startsWith('#')).length;
  console.log(
    `pgbench -S -c ${clients}: ${tps.tps.toFixed(0)} tps; exporter: ${exporter.totals.queries.size} statements kept, ${series} series, ${(bytes / 1024).toFixed(0)} KiB per scrape`,
  );
  console.log(
    `scrape (curl time_total): median ${median(scrapes).toFixed(1)} ms, p95 ${p95(scrapes).toFixed(1)} ms over ${scrapes.length} scrapes`,
  );
  console.log(
    `flush without scrapes: median ${median(results.off).toFixed(2)} ms, p95 ${p95(results.off).toFixed(2)} ms (${results.off.length} flushes)`,
  );
  console.log(
    `flush with a 1 s scrape: median ${median(results.on).toFixed(2)} ms, p95 ${p95(results.on).toFixed(2)} ms (${results.on.length} flushes)`,
  );
} finally {
  await sidecar?.stop();
  await exporter?.close();
  await cluster.stop();
}
