/*
 * Per-event cost of the lock families' BPF programs: a contended workload (heavyweight
 * extension and row locks, LWLock and spinlock contention) against a throwaway cluster with
 * the locks, lwlock and spinlock sets attached (or the sets --sets names, `none` for the default
 * sets alone: the blockers set's wake-ups are mostly lock releases), and kernel.bpf_stats_enabled on meanwhile.
 * Prints each program's runs and mean ns per run (program time only: the uprobe trap around
 * it, ~4 us on our VMs, comes on top of every run).
 *
 *   node dist/bench/lock-probe-cost.js [--pg-bin DIR] [--clients 16] [--seconds 5] [--sets locks,lwlock,spinlock]
 */
import { readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { parseProbeSets } from '../src/families/index.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { listPrograms, programDeltas, readStatsEnabled, setStatsEnabled } from './bpf-stats.js';
import { SWITCH_PROGRAMS } from '../src/collector/switch-program.js';

const LOCK_PROGRAMS = [
  'on_lock_start',
  'on_lock_done',
  'on_procsleep',
  'on_procsleep_rt',
  'on_lwlock_start',
  'on_lwlock_done',
  'on_sema_lock',
  'on_sema_lock_rt',
  'on_spin_delay',
  ...SWITCH_PROGRAMS,
  'on_sched_waking',
];

/** Program ids this process holds open: ours, not another collector's of the same name. */
function ownPrograms(): Set<number> {
  const ids = new Set<number>();
  for (const fd of readdirSync('/proc/self/fdinfo')) {
    try {
      const id = /^prog_id:\s+(\d+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1];
      if (id) ids.add(Number(id));
    } catch {
      // fd closed meanwhile
    }
  }
  return ids;
}

const { values } = parseArgs({
  options: {
    'pg-bin': { type: 'string' },
    clients: { type: 'string', default: '16' },
    seconds: { type: 'string', default: '5' },
    sets: { type: 'string', default: 'locks,lwlock,spinlock' },
  },
});
const probeSets = values.sets === 'none' ? [] : parseProbeSets(values.sets);
const cluster = await ThrowawayCluster.start(values['pg-bin'] ? { pgBin: resolve(values['pg-bin']) } : {});
const statsBefore = readStatsEnabled();
let sidecar: Sidecar | null = null;
try {
  const admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE TABLE hot (id bigint, pad text)');
  await admin.query('CREATE TABLE counters (id int PRIMARY KEY, n bigint)');
  await admin.query('INSERT INTO counters SELECT g, 0 FROM generate_series(1, 4) g');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 1000,
    probeSets,
  });
  const own = ownPrograms();
  await setStatsEnabled('1');
  const before = await listPrograms();
  const clients = await Promise.all(
    Array.from({ length: Number(values.clients) }, async () => {
      const c = new pg.Client(cluster.connectionString());
      await c.connect();
      return c;
    }),
  );
  const until = performance.now() + Number(values.seconds) * 1000;
  let statements = 0;
  await Promise.all(
    clients.map(async (c, i) => {
      while (performance.now() < until) {
        // Half insert into one table (extension lock, WAL and buffer LWLocks), half update four rows (row locks).
        if (i % 2) await c.query("INSERT INTO hot SELECT g, repeat('x', 100) FROM generate_series(1, 20) g");
        else await c.query('UPDATE counters SET n = n + 1 WHERE id = $1', [1 + (statements % 4)]);
        statements++;
      }
    }),
  );
  const after = await listPrograms();
  await Promise.all(clients.map((c) => c.end()));
  await admin.end();
  console.log(
    `${statements} statements by ${values.clients} clients in ${values.seconds} s, sets ${values.sets}, PostgreSQL ${sidecar.target.majorVersion} at ${sidecar.target.binaryPath}`,
  );
  console.log('program          runs      ns/run   runs/statement');
  for (const d of programDeltas(before, after)) {
    if (!own.has(d.id) || !LOCK_PROGRAMS.includes(d.name) || d.runCnt === 0) continue;
    console.log(
      `${d.name.padEnd(16)} ${String(d.runCnt).padStart(8)} ${(d.runTimeNs / d.runCnt).toFixed(0).padStart(10)} ${(d.runCnt / statements).toFixed(3).padStart(14)}`,
    );
  }
} finally {
  await setStatsEnabled(statsBefore);
  await sidecar?.stop();
  await cluster.stop();
}
