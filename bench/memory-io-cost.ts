/**
 * Cost of the memory and io probe sets: exact BPF nanoseconds per event (kernel.bpf_stats_enabled)
 * under workloads that fire each program, and how many of their events a pgbench -S
 * transaction causes.
 *
 *   npm run build && node dist/bench/memory-io-cost.js [--seconds 5]
 *
 * Phases: a cold sequential scan (block requests of a backend), the same scan inside a 64 MB
 * memory cgroup (memcg reclaim), a writer under a 4 MB dirty limit for about a second
 * (writeback throttling; restored after), a plain file read by a non-Postgres process (the
 * filter-out path every block request on the host takes), and pgbench -S.
 */
import { parseArgs } from 'node:util';
import { parseDuration } from '../src/cli/parse-duration.js';
import { backendPid } from '../src/storage/backend-pid.js';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { listPrograms, programDeltas, readStatsEnabled, setStatsEnabled, type ProgramStats } from './bpf-stats.js';
import { initPgbench, runSelectOnly } from './pgbench.js';
import { runBench } from './run-bench.js';
import { SWITCH_PROGRAMS } from '../src/collector/switch-program.js';

const MINE = [
  'on_dreclaim_beg',
  'on_dreclaim_end',
  'on_mreclaim_beg',
  'on_mreclaim_end',
  'on_compact_beg',
  'on_compact_end',
  'on_dirty_pause',
  'on_blk_start',
  'on_blk_merge',
  'on_blk_done',
  ...SWITCH_PROGRAMS,
];
const MB = 1024 * 1024;

/** Takes one file out of the page cache (posix_fadvise DONTNEED through dd); the rest stays. */
function evict(path: string): void {
  execFileSync('sync');
  execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none']);
}

/** Entries left in io_inflight (requests started by a backend and not completed yet, or stale). */
function inflightEntries(): number {
  const maps = JSON.parse(execFileSync('bpftool', ['-j', 'map', 'show'], { encoding: 'utf8' })) as { id: number; name?: string }[];
  return maps
    .filter((m) => m.name === 'io_inflight')
    .reduce(
      (n, m) =>
        n + (JSON.parse(execFileSync('bpftool', ['-j', 'map', 'dump', 'id', String(m.id)], { encoding: 'utf8' })) as unknown[]).length,
      0,
    );
}

function report(phase: string, deltas: ProgramStats[], per?: { label: string; n: number }): void {
  const lines = deltas
    .filter((d) => d.runCnt > 0)
    .map(
      (d) =>
        `  ${d.name.padEnd(16)} ${String(d.runCnt).padStart(9)} events ${(d.runTimeNs / d.runCnt).toFixed(0).padStart(6)} ns/event` +
        (per ? `  ${(d.runCnt / per.n).toFixed(4)} events/${per.label}` : ''),
    );
  console.log(`${phase}:\n${lines.join('\n') || '  (no events)'}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({ args: process.argv.slice(2), options: { seconds: { type: 'string', default: '5' } } });
  const seconds = parseDuration(values.seconds, '--seconds', { bareUnit: 's' }) / 1000;
  const statsBefore = readStatsEnabled();
  const preexisting = new Set((await listPrograms()).map((p) => p.id));
  const cluster = await ThrowawayCluster.start({ settings: { shared_buffers: "'16MB'" } });
  let sidecar: Sidecar | null = null;
  const cgroup = `/sys/fs/cgroup/memory/pgbpf-cost-${process.pid}`;
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 400000) g");
    await admin.query('VACUUM (FREEZE) cold');
    await admin.query('CREATE TABLE dirty (id int, pad text)');
    await admin.query('SET max_parallel_workers_per_gather = 0');
    const coldPath = `${cluster.dataDir}/${(await admin.query("SELECT pg_relation_filepath('cold') AS p")).rows[0].p}`;
    await initPgbench(cluster, 10);
    await admin.query('CHECKPOINT');
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 1000 });
    await setStatsEnabled('1');
    const snapshot = async () => (await listPrograms()).filter((p) => MINE.includes(p.name) && !preexisting.has(p.id));
    const phase = async (name: string, work: () => Promise<unknown>, per?: (result: unknown) => { label: string; n: number }) => {
      const before = await snapshot();
      const result = await work();
      report(name, programDeltas(before, await snapshot()), per?.(result));
      console.log(`  requests still tracked: ${inflightEntries()}`);
    };

    const scan = new pg.Client(cluster.connectionString());
    await scan.connect();
    await scan.query('SET max_parallel_workers_per_gather = 0');
    await phase('cold scan (92 MB)', async () => {
      evict(coldPath);
      await scan.query('SELECT count(*) FROM cold');
    });
    await phase('cold scan in a 64 MB memcg', async () => {
      mkdirSync(cgroup);
      writeFileSync(`${cgroup}/memory.limit_in_bytes`, String(64 * MB));
      writeFileSync(`${cgroup}/cgroup.procs`, String(backendPid(scan)));
      evict(coldPath);
      await scan.query('SELECT sum(length(pad)) FROM cold');
      writeFileSync('/sys/fs/cgroup/memory/cgroup.procs', String(backendPid(scan)));
    });
    const dirty = ['dirty_ratio', 'dirty_bytes', 'dirty_background_ratio', 'dirty_background_bytes'].map(
      (k) => [k, readFileSync(`/proc/sys/vm/${k}`, 'utf8').trim()] as const,
    );
    await phase('writer under a 4 MB dirty limit', async () => {
      try {
        writeFileSync('/proc/sys/vm/dirty_bytes', String(4 * MB));
        writeFileSync('/proc/sys/vm/dirty_background_bytes', String(MB));
        await scan.query("INSERT INTO dirty SELECT g, repeat('y', 200) FROM generate_series(1, 400000) g");
      } finally {
        for (const [k, v] of dirty) if (v !== '0') writeFileSync(`/proc/sys/vm/${k}`, v);
      }
    });
    await scan.end();
    await phase('file read by a non-Postgres process (64 MB)', async () => {
      execFileSync('dd', ['if=/dev/urandom', `of=${cluster.baseDir}/plain.bin`, 'bs=1M', 'count=64', 'status=none']);
      evict(`${cluster.baseDir}/plain.bin`);
      execFileSync('dd', [`if=${cluster.baseDir}/plain.bin`, 'of=/dev/null', 'bs=1M', 'status=none']);
    });
    // Cached OLTP: the pgbench tables in the page cache (shared_buffers is small here).
    await runSelectOnly(cluster, { clients: 2, seconds });
    await phase(
      `pgbench -S, 2 clients, ${seconds} s, page cache warm`,
      () => runSelectOnly(cluster, { clients: 2, seconds }),
      (r) => ({
        label: 'txn',
        n: (r as { transactions: number }).transactions,
      }),
    );
    await admin.end();
  } finally {
    await setStatsEnabled(statsBefore).catch(() => undefined);
    await sidecar?.stop();
    try {
      for (const pid of readFileSync(`${cgroup}/cgroup.procs`, 'utf8').split('\n').filter(Boolean))
        writeFileSync('/sys/fs/cgroup/memory/cgroup.procs', pid);
      rmdirSync(cgroup);
    } catch {
      // never created
    }
    await cluster.stop();
  }
}

runBench(main);
