/*
 * Start-up: how long `pg-bpf-stats run` takes from spawn to its probes attached and to its first
 * figures in bpf_stats, on an idle cluster and under pgbench -S; and how much of it is loading
 * the BPF object (the kernel's verifier), for the default sets' programs and for all of them.
 *
 * - attached: spawn of the CLI (default sets, --interval 1s) to its "attached probe sets" line,
 *   as an operator starts it (the bin's node flags included); that line says how much of it was
 *   loading the BPF programs (the verifier, and finding the postmaster's host pid);
 * - running: spawn to its "collecting every" line (the schema checked, the first flush written);
 * - first figures: spawn to the first backend_stats row this run wrote (last_seen after spawn);
 *   under load, also to the first query_stats row of pgbench's statement;
 * - load: the BPF object's load in this process (the kernel's verifier, every program: the
 *   opt-in sets' are loaded at start too, so that a NOTIFY can attach them without a reload),
 *   configured for the cluster as the collector does it, and with its settings left at zero.
 *
 * Run (root): node dist/bench/start-up.js [--runs 5] [--clients 8] [--loads 5] [--nice=-5]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { CollectorObject, collectorObjectPath } from '../src/collector/collector-object.js';
import { familyRodata, PROBE_SETS } from '../src/families/index.js';
import { probeSetUnsupportedReason } from '../src/capabilities/probe-set-support.js';
import { loadNative } from '../src/native/bpf-native.js';
import { connect } from '../src/storage/connect.js';
import { calibrateStatusLayout } from '../src/postmaster/calibrate-status-layout.js';
import { discoverPostmaster } from '../src/postmaster/discover-postmaster.js';
import { initPgbench, runSelectOnly } from './pgbench.js';
import { runBench } from './run-bench.js';
import { SidecarProcess } from './sidecar-process.js';
import { median } from './report.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    runs: { type: 'string', default: '5' },
    clients: { type: 'string', default: '8' },
    loads: { type: 'string', default: '5' },
    nice: { type: 'string' },
  },
});
const runs = Number(values.runs);
const clients = Number(values.clients);
const loads = Number(values.loads);
/** The collector's niceness (systemd's Nice=); absent: the bench's own. */
const nice = values.nice === undefined ? undefined : Number(values.nice);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const range = (xs: number[]) => `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;

/** Median ms of `load`, run --loads times; each returns what to close. */
function medianLoadMs(load: () => { close(): void }): number {
  const times: number[] = [];
  for (let i = 0; i < loads; i++) {
    const start = performance.now();
    const object = load();
    times.push(performance.now() - start);
    object.close();
  }
  return median(times);
}

/** Polls until `query` returns a row, and returns the time since `sinceMs` (performance.now()). */
async function firstRow(client: pg.Client, query: string, params: unknown[], sinceMs: number, timeoutMs = 30_000): Promise<number> {
  for (const deadline = performance.now() + timeoutMs; performance.now() < deadline; await sleep(20)) {
    if ((await client.query(query, params)).rows.length) return performance.now() - sinceMs;
  }
  throw new Error(`no row within ${timeoutMs} ms: ${query}`);
}

interface Start {
  attachedMs: number;
  /** Spawn to its "collecting every" line: the schema checked and the first flush written. */
  readyMs: number;
  /** Of attachedMs, loading the BPF programs, as the collector's attached line says. */
  loadMs: number;
  backendRowMs: number;
  queryRowMs: number | null;
}

async function startOnce(cluster: ThrowawayCluster, admin: pg.Client, loaded: boolean): Promise<Start> {
  // The wall clock of the spawn, as the server compares it with last_seen (to the ms).
  const spawnedAt = new Date((await admin.query('SELECT now() AS t')).rows[0].t as Date);
  const sinceMs = performance.now();
  const { sidecar, attachMs, readyMs } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, nice });
  try {
    const backendRowMs = await firstRow(admin, 'SELECT 1 FROM bpf_stats.backend_stats WHERE last_seen >= $1 LIMIT 1', [spawnedAt], sinceMs);
    const queryRowMs = loaded
      ? await firstRow(
          admin,
          `SELECT 1 FROM bpf_stats.query_stats q JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)
            WHERE s.query LIKE 'SELECT abalance FROM pgbench_accounts%' AND q.last_seen >= $1`,
          [spawnedAt],
          sinceMs,
        )
      : null;
    const load = /of which (\d+) ms loading the BPF programs\)/.exec(sidecar.attachedLine() ?? '');
    if (!load) throw new Error(`no start-up times in: ${sidecar.attachedLine()}`);
    return { attachedMs: attachMs, readyMs, loadMs: Number(load[1]), backendRowMs, queryRowMs };
  } finally {
    await sidecar.stop();
  }
}

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  const admin = new pg.Client(cluster.connectionString());
  try {
    await admin.connect();
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    // The object as the collector loads it: configured for this cluster (its status layout's
    // offsets in .rodata), which keeps code live that an object with zeroed settings has pruned.
    const observer = await connect(cluster.connectionString());
    try {
      const target = await discoverPostmaster(admin);
      const layout = await calibrateStatusLayout(target, admin, observer);
      const configured = medianLoadMs(() => CollectorObject.load({ target, layout, probeSets: PROBE_SETS, rodata: familyRodata(target) }));
      // As `run` loads it: the programs of the default sets this cluster supports (the others' come when requested).
      const support = { target, layout, perfEvents: {} };
      const defaults = Object.values(PROBE_SETS)
        .filter((set) => set.default && !probeSetUnsupportedReason(set.name, support))
        .map((set) => set.name);
      const preloaded = medianLoadMs(() =>
        CollectorObject.load({ target, layout, probeSets: PROBE_SETS, rodata: familyRodata(target), preload: defaults }),
      );
      const bare = medianLoadMs(() => {
        const object = new (loadNative().BpfObject)(collectorObjectPath());
        object.load();
        return object;
      });
      print(
        `start-up: loading the BPF object (the verifier), median of ${loads}: ${preloaded.toFixed(0)} ms with the default sets' programs as run loads it, ` +
          `${configured.toFixed(0)} ms with every program, ${bare.toFixed(0)} ms with every program and the settings left at zero`,
      );
    } finally {
      await observer.end();
    }
    await initPgbench(cluster, 10);
    // Idle means idle: autovacuum would otherwise analyze the new tables during the first starts.
    await admin.query('VACUUM ANALYZE');
    await admin.query('CHECKPOINT');
    // The schema exists before the timed runs, as it does after an operator's first start.
    const first = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined });
    await first.sidecar.stop();

    const idle: Start[] = [];
    for (let i = 0; i < runs; i++) idle.push(await startOnce(cluster, admin, false));
    const busy: Start[] = [];
    let loading = true;
    const load = (async () => {
      while (loading) await runSelectOnly(cluster, { clients, seconds: 5 });
    })();
    try {
      await sleep(2000);
      for (let i = 0; i < runs; i++) busy.push(await startOnce(cluster, admin, true));
    } finally {
      loading = false;
      await load;
    }

    print();
    print(
      `| cluster | spawn → attached, ms | of which loading the BPF programs, ms | spawn → running, ms | spawn → first backend row, ms | spawn → first pgbench statement row, ms |`,
    );
    print('| --- | ---: | ---: | ---: | ---: | ---: |');
    print(
      `| idle | ${range(idle.map((s) => s.attachedMs))} | ${range(idle.map((s) => s.loadMs))} | ${range(idle.map((s) => s.readyMs))} | ${range(idle.map((s) => s.backendRowMs))} | — |`,
    );
    print(
      `| pgbench -S, ${clients} clients | ${range(busy.map((s) => s.attachedMs))} | ${range(busy.map((s) => s.loadMs))} | ${range(busy.map((s) => s.readyMs))} | ${range(busy.map((s) => s.backendRowMs))} | ${range(busy.map((s) => s.queryRowMs!))} |`,
    );
    print(`(median, and min–max, of ${runs} starts each${nice === undefined ? '' : `, the collector at nice ${nice}`})`);
  } finally {
    await admin.end().catch(() => undefined);
    await cluster.stop();
  }
}

runBench(main);
