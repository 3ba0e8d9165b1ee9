/*
 * Against what a DBA would install instead: CPU per transaction at a fixed moderate rate.
 *
 * One throwaway cluster (PostgreSQL 15, the peers are Debian's packages for it), restarted
 * under each configuration in rotation, every round:
 *   baseline         shared_preload_libraries = pg_stat_statements
 *   pg-bpf-stats     the same, plus `pg-bpf-stats run` (default sets, --interval 1s)
 *   pg_stat_kcache   pg_stat_statements, pg_stat_kcache (two getrusage() per statement)
 *   pg_wait_sampling pg_stat_statements, pg_wait_sampling (a 10 ms sampler)
 * pgbench -S -R <rate> (fixed rate, so every configuration does the same work) runs for
 * --seconds after --warmup seconds; the cluster's processes and the collector are in one cpuacct
 * cgroup (pgbench is outside), so CPU per transaction = cpuacct.usage / transactions. Each
 * configuration's extra is against the same round's baseline.
 *
 * Installs postgresql-15-pg-stat-kcache and postgresql-15-pg-wait-sampling with apt-get when
 * missing (the tests never need them).
 *
 * Run (root): node dist/bench/peers.js [--rounds 3] [--seconds 30] [--warmup 5] [--rate 3000] [--clients 4]
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { clusterPids, CpuGroup } from './cpu-group.js';
import { initPgbench, parsePgbenchOutput } from './pgbench.js';
import { SidecarProcess } from './sidecar-process.js';
import { runBench } from './run-bench.js';
import { median } from './report.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '30' },
    warmup: { type: 'string', default: '5' },
    rate: { type: 'string', default: '3000' },
    clients: { type: 'string', default: '4' },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const PG_BIN = '/usr/lib/postgresql/15/bin';
const PACKAGES = ['postgresql-15-pg-stat-kcache', 'postgresql-15-pg-wait-sampling'];

interface Config {
  name: string;
  libraries: string;
  extensions: string[];
  collector: boolean;
}
const CONFIGS: Config[] = [
  { name: 'baseline (pg_stat_statements)', libraries: 'pg_stat_statements', extensions: ['pg_stat_statements'], collector: false },
  { name: 'pg-bpf-stats (default sets)', libraries: 'pg_stat_statements', extensions: ['pg_stat_statements'], collector: true },
  {
    name: 'pg_stat_kcache',
    libraries: 'pg_stat_statements,pg_stat_kcache',
    extensions: ['pg_stat_statements', 'pg_stat_kcache'],
    collector: false,
  },
  {
    name: 'pg_wait_sampling',
    libraries: 'pg_stat_statements,pg_wait_sampling',
    extensions: ['pg_stat_statements', 'pg_wait_sampling'],
    collector: false,
  },
];

function ensurePeers(): void {
  const missing = PACKAGES.filter((p) => {
    try {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own format, not a template
      return !execFileSync('dpkg-query', ['-W', '-f', '${Status}', p], { encoding: 'utf8' }).includes('install ok installed');
    } catch {
      return true;
    }
  });
  if (!missing.length) return;
  print(`installing ${missing.join(', ')} (apt-get)`);
  execFileSync('apt-get', ['install', '-y', '-q', ...missing], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
}

async function sql(cluster: ThrowawayCluster, text: string): Promise<void> {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

const postmasterPid = (cluster: ThrowawayCluster) => Number(readFileSync(`${cluster.dataDir}/postmaster.pid`, 'utf8').split('\n')[0]);

function pgbenchArgs(cluster: ThrowawayCluster, runSeconds: number): string[] {
  return [
    '-h',
    '127.0.0.1',
    '-p',
    String(cluster.port),
    '-U',
    'postgres',
    '-S',
    '-n',
    '-c',
    values.clients!,
    '-j',
    '2',
    '-R',
    values.rate!,
    '-T',
    String(runSeconds),
    'postgres',
  ];
}

async function main(): Promise<void> {
  if (!existsSync(`${PG_BIN}/postgres`)) throw new Error('PostgreSQL 15 is needed (the peers are packaged for it)');
  ensurePeers();
  const cluster = await ThrowawayCluster.start({ pgBin: PG_BIN });
  let sidecar: SidecarProcess | null = null;
  let group: CpuGroup | null = null;
  try {
    await initPgbench(cluster, 10);
    print(
      `peers: pgbench -S -R ${values.rate} -c ${values.clients}, ${seconds} s after ${warmup} s, ${rounds} round(s), cluster + collector CPU per transaction`,
    );
    const results = new Map<string, number[]>(CONFIGS.map((c) => [c.name, []]));
    for (let round = 1; round <= rounds; round++) {
      for (const config of CONFIGS) {
        // A list, one quoted name each: 'a,b' in one pair of quotes would be one library named "a,b".
        await sql(
          cluster,
          `ALTER SYSTEM SET shared_preload_libraries = ${config.libraries
            .split(',')
            .map((l) => `'${l}'`)
            .join(', ')}`,
        );
        await cluster.restart();
        for (const extension of config.extensions) await sql(cluster, `CREATE EXTENSION IF NOT EXISTS ${extension}`);
        group = new CpuGroup();
        for (const pid of clusterPids(postmasterPid(cluster))) group.add(pid);
        if (config.collector) {
          ({ sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined }));
          group.add(sidecar.pid);
          for (const pid of clusterPids(postmasterPid(cluster))) group.add(pid);
        }
        await cluster.exec('pgbench', pgbenchArgs(cluster, warmup), 120_000);
        const before = group.usageNs();
        const { stdout } = await cluster.exec('pgbench', pgbenchArgs(cluster, seconds), seconds * 1000 + 120_000);
        const usedNs = group.usageNs() - before;
        const { transactions, tps } = parsePgbenchOutput(stdout);
        const usPerTxn = usedNs / 1000 / transactions;
        results.get(config.name)!.push(usPerTxn);
        print(`round ${round} ${config.name.padEnd(30)} ${usPerTxn.toFixed(1)} µs/txn (${tps.toFixed(0)} tps)`);
        await sidecar?.stop();
        sidecar = null;
        await sql(cluster, 'SELECT 1');
        // Back to the root group before the next configuration's restart.
        group.remove();
        group = null;
      }
    }
    const base = results.get(CONFIGS[0]!.name)!;
    print();
    print("| configuration | CPU µs per transaction (median) | extra vs the same round's baseline (each round) |");
    print('| --- | ---: | --- |');
    for (const config of CONFIGS) {
      const xs = results.get(config.name)!;
      const extras = xs.map((x, i) => (100 * (x - base[i]!)) / base[i]!);
      print(
        `| ${config.name} | ${median(xs).toFixed(1)} | ${config === CONFIGS[0] ? '-' : `${extras.map((e) => `${e >= 0 ? '+' : ''}${e.toFixed(1)}%`).join(', ')} (median ${median(extras).toFixed(1)}%)`} |`,
      );
    }
  } finally {
    await sidecar?.stop().catch(() => undefined);
    await cluster.stop();
    group?.remove();
  }
}

runBench(main);
