/*
 * One application role, a burst of distinct statements (issue 38): `--sessions` sessions of
 * one login role run `--statements` distinct statements (IN-lists of 1-1,000 elements × select
 * lists of 1-20 columns) once each, as fast as they go, with pg_stat_statements.max at
 * `--pgss-max` and the query set on. Then: the share of pg_stat_statements' keys for that role
 * that bpf_stats.query_stats has with exactly its calls (goal 100%), the refusals counted, and
 * the queries map's size and kernel memory (full, per CPU, and in use now).
 *
 * Run: node dist/bench/distinct-burst.js [--statements 20000] [--sessions 20] [--pgss-max 30000] [--interval-ms 1000]
 * Needs root (BPF) and PostgreSQL's server binaries.
 */
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Structs } from '../src/bpf/contract.js';
import { mapsFullBytes } from '../src/capabilities/memory-limit.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { loadNative, MapType } from '../src/native/bpf-native.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { compareWithPgss, createBurstTable, runBurst } from './distinct-burst-workload.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const ROLE = 'burst_app';

/** The kernel's own figure for the newest map named `queries`: bytes_memlock (its memory in use on 6.x kernels). */
function queriesMapMemlock(): number | null {
  try {
    const maps = JSON.parse(execFileSync('bpftool', ['-j', 'map', 'show'], { encoding: 'utf8' })) as Array<{
      id: number;
      name: string;
      bytes_memlock?: number;
    }>;
    const ours = maps.filter((m) => m.name === 'queries').sort((a, b) => b.id - a.id)[0];
    return ours?.bytes_memlock ?? null;
  } catch {
    return null;
  }
}

const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      statements: { type: 'string', default: '20000' },
      sessions: { type: 'string', default: '20' },
      'pgss-max': { type: 'string', default: '30000' },
      'interval-ms': { type: 'string', default: '1000' },
    },
  });
  const statements = Number(values.statements);
  const sessions = Number(values.sessions);
  const pgssMax = Number(values['pgss-max']);
  const intervalMs = Number(values['interval-ms']);
  const cluster = await ThrowawayCluster.start({ settings: { 'pg_stat_statements.max': pgssMax } });
  let sidecar: Sidecar | null = null;
  const admin = new pg.Client(cluster.connectionString());
  try {
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    await admin.query(`CREATE ROLE ${ROLE} LOGIN`);
    await createBurstTable(admin, ROLE);
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs, probeSets: ['query'] });
    await admin.query('SELECT pg_stat_statements_reset()');
    const ms = await runBurst(cluster.connectionString().replace('postgres@', `${ROLE}@`), statements, sessions);
    // Two flushes: the second writes what the first evicted or took after its read.
    await sidecar.flush();
    await sidecar.flush();
    const result = await compareWithPgss(admin, ROLE);
    const health = (
      await admin.query(`SELECT dropped, map_fill->'queries' AS queries FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`, [
        process.pid,
      ])
    ).rows[0];
    const cpus = loadNative().numPossibleCpus();
    const maxEntries = Number(health.queries.max_entries);
    const full = mapsFullBytes(
      [{ name: 'queries', type: MapType.PERCPU_HASH, keySize: Structs.query_key.size, valueSize: Structs.query_value.size, maxEntries }],
      cpus,
    );
    const perCpu = maxEntries * Math.ceil(Structs.query_value.size / 8) * 8;
    const memlock = queriesMapMemlock();
    const nonZero = Object.entries(health.dropped as Record<string, number>).filter(([, v]) => Number(v) > 0);
    print(
      `${statements} distinct statements from ${sessions} sessions of one role in ${(ms / 1000).toFixed(1)} s (${Math.round(statements / (ms / 1000))}/s), pg_stat_statements.max ${pgssMax}, --probes query, flush every ${intervalMs} ms`,
    );
    print(
      `keys of pg_stat_statements with exact calls in bpf_stats.query_stats: ${result.exact} of ${result.pgss} (${((100 * result.exact) / Math.max(1, result.pgss)).toFixed(2)}%); missing ${result.missing}, other calls ${result.wrongCalls}${result.examples.length ? ` e.g. ${JSON.stringify(result.examples)}` : ''}`,
    );
    print(`dropped: ${nonZero.length ? nonZero.map(([k, v]) => `${k} ${v}`).join(', ') : 'none'}`);
    print(
      `queries map: ${maxEntries} entries max, ${health.queries.entries} held, ${health.queries.evicted} evicted; full ${mb(full)} MB on ${cpus} CPUs (values ${mb(perCpu)} MB per CPU)${memlock !== null ? `, kernel memlock now ${mb(memlock)} MB` : ''}`,
    );
  } finally {
    await sidecar?.stop();
    await admin.end().catch(() => undefined);
    await cluster.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
