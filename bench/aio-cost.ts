/**
 * Cost of the aio probe set (PostgreSQL 18, io_method = worker): exact BPF nanoseconds per
 * event (kernel.bpf_stats_enabled), how many events a scan and a pgbench -S transaction cause,
 * and what the traps cost end to end: the same scans and pgbench runs with the set attached
 * and detached, alternating.
 *
 *   npm run build && node dist/bench/aio-cost.js [--rounds 4] [--seconds 5]
 *
 * Phases, on the embedded PostgreSQL 18 with shared_buffers = 16MB (so reads go to the kernel):
 * a cold sequential scan (page cache dropped: disk reads through the io workers), the same scan
 * with the table in the page cache (the worst case: each IO a worker performs is a copy, the
 * traps are not hidden behind the disk), and pgbench -S at scale 10 (160 MB: most lookups miss
 * shared buffers and read single blocks from the page cache).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import pg from 'pg';
import { parseDuration } from '../src/cli/parse-duration.js';
import { evictFromPageCache } from '../src/cluster/evict-from-page-cache.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import type { CollectorObject } from '../src/collector/collector-object.js';
import type { ProbeSetName } from '../src/families/index.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { packageRoot } from '../src/package-root.js';
import { listPrograms, programDeltas, readStatsEnabled, setStatsEnabled, type ProgramStats } from './bpf-stats.js';
import { parsePgbenchOutput } from './pgbench.js';
import { runBench } from './run-bench.js';
import { median } from './report.js';

const run = promisify(execFile);
const MINE = ['on_aio_submit', 'on_aio_perform', 'on_aio_performed', 'on_blk_start', 'on_blk_done'];
/** pgbench is not in the embedded build: the system's (any 14+ client drives an 18 server). */
const PGBENCH = '/usr/lib/postgresql/15/bin/pgbench';

async function pgbench(cluster: ThrowawayCluster, args: string[]): Promise<string> {
  const { stdout } = await run(
    'runuser',
    ['-u', 'postgres', '--', PGBENCH, '-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', ...args, 'postgres'],
    {
      maxBuffer: 16 * 1024 * 1024,
      env: cluster.clientEnv(),
    },
  );
  return stdout;
}

function report(phase: string, deltas: ProgramStats[], per?: { label: string; n: number }): void {
  const lines = deltas
    .filter((d) => d.runCnt > 0)
    .map(
      (d) =>
        `  ${d.name.padEnd(18)} ${String(d.runCnt).padStart(9)} events ${(d.runTimeNs / d.runCnt).toFixed(0).padStart(6)} ns/event` +
        (per ? `  ${(d.runCnt / per.n).toFixed(4)} events/${per.label}` : ''),
    );
  console.log(`${phase}:\n${lines.join('\n') || '  (no events)'}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { seconds: { type: 'string', default: '5' }, rounds: { type: 'string', default: '4' } },
  });
  const seconds = parseDuration(values.seconds, '--seconds', { bareUnit: 's' }) / 1000;
  const rounds = Number(values.rounds);
  const statsBefore = readStatsEnabled();
  const preexisting = new Set((await listPrograms()).map((p) => p.id));
  const cluster = await ThrowawayCluster.start({
    pgBin: join(packageRoot(), 'node_modules/embedded-pg-18/native/bin'),
    settings: { shared_buffers: "'16MB'" },
  });
  let sidecar: Sidecar | null = null;
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    console.log(
      `PostgreSQL ${(await admin.query('SHOW server_version')).rows[0].server_version}, io_method ${(await admin.query('SHOW io_method')).rows[0].io_method}, ` +
        `io_workers ${(await admin.query('SHOW io_workers')).rows[0].io_workers}`,
    );
    await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 400000) g");
    await admin.query('VACUUM (FREEZE) cold');
    const coldPath = `${cluster.dataDir}/${(await admin.query("SELECT pg_relation_filepath('cold') AS p")).rows[0].p}`;
    const mb = Number((await admin.query("SELECT pg_relation_size('cold') AS n")).rows[0].n) / 1024 / 1024;
    await pgbench(cluster, ['-i', '-q', '-s', '10']);
    await admin.query('CHECKPOINT');
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 1000 });
    // The default sets cannot be detached through the sidecar's API: the bench toggles the set on the object.
    const probes = (sidecar as unknown as { object: CollectorObject<ProbeSetName> }).object.probes;
    if (!probes.attached().includes('aio')) throw new Error(`the aio set is not attached: ${probes.attached().join(', ')}`);
    await setStatsEnabled('1');
    const snapshot = async () => (await listPrograms()).filter((p) => MINE.some((m) => m.startsWith(p.name)) && !preexisting.has(p.id));

    const scan = new pg.Client(cluster.connectionString());
    await scan.connect();
    await scan.query('SET max_parallel_workers_per_gather = 0');
    await scan.query('EXPLAIN SELECT count(pad) FROM cold');
    const timed = async (sql: string) => {
      const started = performance.now();
      await scan.query(sql);
      return performance.now() - started;
    };

    let before = await snapshot();
    evictFromPageCache(coldPath);
    const coldMs = await timed('SELECT count(pad) FROM cold');
    report(`cold scan (${mb.toFixed(0)} MB, page cache dropped, ${coldMs.toFixed(0)} ms)`, programDeltas(before, await snapshot()), {
      label: 'MB',
      n: mb,
    });

    await timed('SELECT count(pad) FROM cold'); // page cache warm from here on
    before = await snapshot();
    const warmOn: number[] = [];
    const warmOff: number[] = [];
    for (let r = 0; r < rounds; r++) {
      warmOn.push(await timed('SELECT count(pad) FROM cold'));
      probes.detach('aio');
      warmOff.push(await timed('SELECT count(pad) FROM cold'));
      probes.attach('aio');
    }
    report(`warm scans (${mb.toFixed(0)} MB from the page cache), ${rounds} with the set`, programDeltas(before, await snapshot()), {
      label: 'scan',
      n: rounds,
    });
    console.log(
      `  scan wall time, median of ${rounds}: ${median(warmOn).toFixed(1)} ms with aio, ${median(warmOff).toFixed(1)} ms without ` +
        `(all: ${warmOn.map((x) => x.toFixed(0)).join(' ')} | ${warmOff.map((x) => x.toFixed(0)).join(' ')})`,
    );

    await pgbench(cluster, ['-S', '-n', '-c', '2', '-j', '2', '-T', '2']); // warm the page cache
    const tpsOn: number[] = [];
    const tpsOff: number[] = [];
    let txns = 0;
    const deltas: ProgramStats[][] = [];
    for (let r = 0; r < rounds; r++) {
      before = await snapshot();
      const on = parsePgbenchOutput(await pgbench(cluster, ['-S', '-n', '-c', '2', '-j', '2', '-T', String(seconds)]));
      deltas.push(programDeltas(before, await snapshot()));
      txns += on.transactions;
      tpsOn.push(on.tps);
      probes.detach('aio');
      tpsOff.push(parsePgbenchOutput(await pgbench(cluster, ['-S', '-n', '-c', '2', '-j', '2', '-T', String(seconds)])).tps);
      probes.attach('aio');
    }
    const summed = deltas[0]!.map((d) => ({
      ...d,
      runCnt: deltas.reduce((n, ds) => n + (ds.find((x) => x.id === d.id)?.runCnt ?? 0), 0),
      runTimeNs: deltas.reduce((n, ds) => n + (ds.find((x) => x.id === d.id)?.runTimeNs ?? 0), 0),
    }));
    report(`pgbench -S scale 10, 2 clients, ${rounds} x ${seconds} s with the set`, summed, { label: 'txn', n: txns });
    console.log(
      `  tps median: ${median(tpsOn).toFixed(0)} with aio, ${median(tpsOff).toFixed(0)} without (ratio ${(median(tpsOn) / median(tpsOff)).toFixed(3)}; ` +
        `all: ${tpsOn.map((x) => x.toFixed(0)).join(' ')} | ${tpsOff.map((x) => x.toFixed(0)).join(' ')})`,
    );
    await scan.end();
    await admin.end();
  } finally {
    await setStatsEnabled(statsBefore).catch(() => undefined);
    await sidecar?.stop();
    await cluster.stop();
  }
}

runBench(main);
