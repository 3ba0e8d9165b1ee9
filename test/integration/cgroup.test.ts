import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * The memory cgroup per process, as containers use it: two "containers" (memory cgroups) whose
 * backends are born in them, one under a memory limit its scan exceeds. Ground truth: the
 * kernel's /proc/<pid>/cgroup for every process, and the limited cgroup's own charge counters
 * for the pages its processes reclaimed.
 */
let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let relationBytes = 0;
let coldPath = '';
const MB = 1024 * 1024;

/** The memory hierarchy path of `pid`, as the kernel shows it in /proc/<pid>/cgroup. */
function memoryPathOf(pid: number): string {
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const [, controllers, path] = line.split(':');
    if (controllers?.split(',').includes('memory')) return path!;
  }
  throw new Error(`no memory cgroup line for ${pid}`);
}

function postmasterPid(): number {
  return Number(readFileSync(join(cluster.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** A session whose backend is born in `cgroup`: the postmaster forks it while in there. */
async function connectIn(cgroup: MemoryCgroup): Promise<{ client: pg.Client; pid: number }> {
  const postmaster = postmasterPid();
  const home = memoryPathOf(postmaster);
  cgroup.add(postmaster);
  try {
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    await client.query('SET max_parallel_workers_per_gather = 0');
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    return { client, pid };
  } finally {
    // Back where it was: later forks are born there again.
    writeFileSync(join('/sys/fs/cgroup/memory', home, 'cgroup.procs'), String(postmaster));
  }
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ settings: { shared_buffers: "'16MB'" } });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 250000) g");
  await admin.query('VACUUM (FREEZE) cold');
  await admin.query('CHECKPOINT');
  relationBytes = Number((await admin.query("SELECT pg_relation_size('cold') AS n")).rows[0].n);
  coldPath = join(cluster.dataDir, (await admin.query("SELECT pg_relation_filepath('cold') AS p")).rows[0].p);
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, log: () => {} });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('memory cgroups per process (containers)', () => {
  it('records each process in the cgroup it was born in, and reads reclaim per cgroup from the limited one', async () => {
    expect(MemoryCgroup.available(), 'cgroup v1 memory controller').toBe(true);
    const limited = MemoryCgroup.create('pgbpf-container-a', 32 * MB);
    const roomy = MemoryCgroup.create('pgbpf-container-b', 4096 * MB);
    const sessions: pg.Client[] = [];
    try {
      const a = await connectIn(limited);
      const b = await connectIn(roomy);
      sessions.push(a.client, b.client);
      await a.client.query('EXPLAIN SELECT sum(length(pad)) FROM cold'); // catalogs cached first
      expect(evictFromPageCache(coldPath), 'bytes of the relation still cached').toBe(0);
      const usageBefore = limited.usage();
      const failsBefore = limited.failcnt();
      await a.client.query('SELECT sum(length(pad)) FROM cold');
      // Pages reclaimed = pages charged (the relation, read through the page cache) - growth.
      const expected = (relationBytes - (limited.usage() - usageBefore)) / 4096;
      expect(limited.failcnt()).toBeGreaterThan(failsBefore);
      await b.client.query('SELECT count(*) FROM generate_series(1, 100000)');
      expect(roomy.failcnt()).toBe(0);
      await sidecar.flush();

      // Every process's row names the cgroup the kernel shows for it.
      const live = await admin.query(
        `SELECT b.pid, b.cgroup FROM bpf_stats.backend_stats b WHERE b.exited_at IS NULL AND b.pid IN (SELECT pid FROM pg_stat_activity)`,
      );
      expect(live.rows.map((r) => r.pid)).toEqual(expect.arrayContaining([a.pid, b.pid]));
      expect(live.rows.length).toBeGreaterThan(2);
      for (const row of live.rows) expect(row.cgroup, `pid ${row.pid}`).toBe(memoryPathOf(row.pid));
      const pathA = memoryPathOf(a.pid);
      const pathB = memoryPathOf(b.pid);
      expect(pathA).toMatch(/pgbpf-container-a/);
      expect(pathB).toMatch(/pgbpf-container-b/);

      const perCgroup = new Map(
        (await admin.query('SELECT cgroup, processes, reclaim_pages FROM bpf_stats.cgroup_memory')).rows.map((r) => [r.cgroup, r]),
      );
      const rowA = perCgroup.get(pathA);
      const rowB = perCgroup.get(pathB);
      expect(Number(rowA.processes)).toBe(1);
      expect(Number(rowB.processes)).toBe(1);
      const pages = Number(rowA.reclaim_pages);
      console.log(
        `cgroup ${pathA}: reclaim_pages ${pages}, expected ~${expected.toFixed(0)} from its charge counters; ${pathB}: ${rowB.reclaim_pages}`,
      );
      expect(pages).toBeGreaterThan(0.5 * expected);
      expect(pages).toBeLessThan(1.1 * expected + 512);
      expect(Number(rowB.reclaim_pages)).toBe(0);
    } finally {
      await Promise.all(sessions.map((s) => s.end()));
      roomy.remove();
      limited.remove();
    }
  });
});
