import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { SidecarProcess } from '../../bench/sidecar-process.js';
import { mainHostPid, POSTGRES_IMAGES, requireContainerPrerequisites, uniqueName } from '../support/podman.js';
import { expectColdReadCharged } from '../support/container-cold-read.js';

/*
 * PostgreSQL 17 in a real container (podman, runc, cgroupfs) under a memory limit
 * (`--memory`, through testcontainers), the collector on the host with its default sets
 * (memory and io among them). Ground truth is the container's own accounting, never the
 * collector's: its memory cgroup's charge counters (cgroup v1 here: memory.usage_in_bytes,
 * memory.failcnt, memory.limit_in_bytes under /sys/fs/cgroup/memory/<the container's path>),
 * pg_stat_statements' shared_blks_read and pg_relation_size for a cold read, the relation's
 * file reached through /proc/<postmaster>/root.
 */
const MB = 1024 * 1024;
/** The container's memory limit: the big table is about twice this. */
const MEMORY_LIMIT = 128 * MB;
const password = randomBytes(12).toString('hex');
let container: StartedTestContainer | undefined;
let connectTo: pg.ClientConfig;
let admin: pg.Client;
let collector: SidecarProcess | undefined;
let postmasterHostPid = 0;
/** The container's memory cgroup as /proc/<pid>/cgroup names it, and its directory. */
let cgroupPath = '';
let cgroupDir = '';

async function connect(): Promise<pg.Client> {
  const client = new pg.Client({ ...connectTo, options: '-c search_path=pg_catalog,pg_temp' });
  await client.connect();
  return client;
}

/** The memory hierarchy's line of /proc/<pid>/cgroup (cgroup v1 here). */
function memoryCgroupOf(pid: number): string {
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const [, controllers, path] = line.split(':');
    if (controllers?.split(',').includes('memory')) return path!;
  }
  throw new Error(`/proc/${pid}/cgroup has no memory line (this test needs the cgroup v1 memory controller)`);
}

function cgroupCounter(file: string): number {
  return Number(readFileSync(join(cgroupDir, file), 'utf8'));
}

/** A table's size, and its data file as the host reaches it (through the postmaster's root; under 1 GB: one segment). */
async function relation(name: string): Promise<{ bytes: number; path: string }> {
  const { rows } = await admin.query(
    `SELECT pg_catalog.pg_relation_size($1::regclass)::float8 AS bytes,
            pg_catalog.current_setting('data_directory') || '/' || pg_catalog.pg_relation_filepath($1::regclass) AS path`,
    [`public.${name}`],
  );
  return { bytes: rows[0].bytes, path: `/proc/${postmasterHostPid}/root${rows[0].path}` };
}

interface QueryRow {
  calls: number;
  shared_blks_read: number;
  blk_read_bytes: number;
  reclaim_pages: number;
  reclaim_ms: number;
  total_time_ms: number;
}

/** query_stats of the one statement whose text is `query`, beside pg_stat_statements', once `until` holds. */
async function statsFor(query: string, until: (row: QueryRow) => boolean): Promise<QueryRow> {
  let row: QueryRow | undefined;
  await expect
    .poll(
      async () => {
        const { rows } = await admin.query<QueryRow>(
          `SELECT q.calls::float8 AS calls, s.shared_blks_read::float8 AS shared_blks_read, q.blk_read_bytes::float8 AS blk_read_bytes,
                  q.reclaim_pages::float8 AS reclaim_pages, q.reclaim_ms, q.total_time_ms
             FROM public.pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query = $1`,
          [query],
        );
        row = rows[0];
        return rows.length === 1 && until(rows[0]!);
      },
      { timeout: 15_000, interval: 250 },
    )
    .toBe(true);
  return row!;
}

beforeAll(async () => {
  await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[17]] });
  container = await new GenericContainer(POSTGRES_IMAGES[17])
    .withName(uniqueName('pg-bpf-stats-test-pg17-memcg'))
    .withEnvironment({ POSTGRES_PASSWORD: password })
    // Small shared buffers, so the scans read through the kernel; wal_level minimal, so the
    // tables are created without writing their size again as WAL in a 128 MB container.
    .withCommand([
      'postgres',
      '-c',
      'shared_preload_libraries=pg_stat_statements',
      '-c',
      'shared_buffers=16MB',
      '-c',
      'wal_level=minimal',
      '-c',
      'max_wal_senders=0',
      '-c',
      'max_parallel_workers_per_gather=0',
    ])
    .withResourcesQuota({ memory: MEMORY_LIMIT / 1024 ** 3 })
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage('database system is ready to accept connections'))
    .withStartupTimeout(120_000)
    .start();
  postmasterHostPid = await mainHostPid(container.getId());
  cgroupPath = memoryCgroupOf(postmasterHostPid);
  cgroupDir = join('/sys/fs/cgroup/memory', cgroupPath);
  connectTo = { host: '127.0.0.1', port: container.getMappedPort(5432), user: 'postgres', password, database: 'postgres' };
  admin = await connect();
  await admin.query('CREATE EXTENSION pg_stat_statements SCHEMA public');
  await admin.query('CREATE EXTENSION pg_buffercache SCHEMA public');
  // About 48 MB (the cold read, under the limit) and 240 MB (about twice the limit).
  for (const [name, rows] of [
    ['cold', 200_000],
    ['big', 1_000_000],
  ] as const) {
    await admin.query(
      `CREATE TABLE public.${name} AS SELECT g AS id, pg_catalog.repeat('x', 200) AS pad FROM pg_catalog.generate_series(1, ${rows}) g`,
    );
    // Hint bits set now: the measured scans only read.
    await admin.query(`VACUUM (FREEZE) public.${name}`);
  }
  await admin.query('CHECKPOINT');
  ({ sidecar: collector } = await SidecarProcess.start({
    dsn: `postgresql://postgres@127.0.0.1:${connectTo.port}/postgres`,
    interval: '200ms',
    probes: 'query',
    env: { PGPASSWORD: password },
  }));
}, 420_000);

afterAll(async () => {
  try {
    if (collector) expect(await collector.stop(), collector.log()).toBe(0);
  } finally {
    await admin?.end().catch(() => undefined);
    // Removed even when a test failed.
    await container?.stop({ timeout: 5_000 });
  }
}, 60_000);

describe('PostgreSQL 17 in a container with a 128 MB memory limit, the collector on the host', () => {
  it('attaches the memory and io sets, and finds the container in its own memory cgroup with the limit podman set', () => {
    expect(collector!.attachedLine()).toMatch(/\bmemory\b/);
    expect(collector!.attachedLine()).toMatch(/\bio\b/);
    expect(cgroupPath).toContain(container!.getId());
    expect(cgroupCounter('memory.limit_in_bytes')).toBe(MEMORY_LIMIT);
  });

  it("charges a cold read to its statement: what PostgreSQL read (shared_blks_read), the relation's size (pg_relation_size)", async () => {
    // The big table leaves the page cache too, so the read fits under the limit and nothing read is reclaimed before use.
    await expectColdReadCharged({
      admin,
      connect,
      postmasterHostPid,
      collectorHostPid: collector!.pid!,
      table: 'cold',
      alsoUncached: ['big'],
    });
  });

  it("gives a scan twice the container's limit the pages its memory cgroup reclaimed, per statement, per backend and per container", async () => {
    const big = await relation('big');
    const cold = await relation('cold');
    const client = await connect();
    try {
      await client.query('EXPLAIN SELECT pg_catalog.sum(pg_catalog.length(pad)) FROM public.big'); // catalogs cached first
      const nsPid = (await client.query('SELECT pg_catalog.pg_backend_pid() AS pid')).rows[0].pid as number;
      // Every page of the relation is charged to the container when the scan reads it.
      expect(evictFromPageCache(big.path), 'bytes of the big table still cached').toBe(0);
      expect(evictFromPageCache(cold.path), 'bytes of the cold table still cached').toBe(0);
      // Nothing in the container reclaims while it is idle: its figures before the scan, once
      // settled (one statement reads the container's and the backend's rows of one flush).
      const reclaimed = async () => {
        const { rows } = await admin.query(
          `SELECT (SELECT reclaim_pages::float8 FROM bpf_stats.cgroup_memory WHERE cgroup = $1) AS container,
                  (SELECT reclaim_pages::float8 FROM bpf_stats.backend_stats WHERE pid = $2 AND exited_at IS NULL) AS backend`,
          [cgroupPath, nsPid],
        );
        return { container: Number(rows[0].container ?? 0), backend: Number(rows[0].backend ?? 0) };
      };
      let before = { container: -1, backend: -1 };
      for (let now = await reclaimed(); now.container !== before.container || now.backend !== before.backend; now = await reclaimed()) {
        before = now;
        await new Promise((r) => setTimeout(r, 600)); // three flushes
      }
      const usageBefore = cgroupCounter('memory.usage_in_bytes');
      const failsBefore = cgroupCounter('memory.failcnt');
      await client.query('SELECT pg_catalog.sum(pg_catalog.length(pad)) FROM public.big');
      // Ground truth, the container's own charge counter (memory.usage_in_bytes; cgroup v1's
      // memory.stat has no pgscan/pgsteal, and its pgpgin/pgpgout count folios, not pages): the
      // scan charged the whole relation (read through the page cache); what the cgroup holds now
      // beyond what it held before was not reclaimed, the rest was. Measured within 0.5% (the
      // session's own small charges); asserted within 5%.
      const grown = cgroupCounter('memory.usage_in_bytes') - usageBefore;
      const expected = (big.bytes - grown) / 4096;
      const limitHits = cgroupCounter('memory.failcnt') - failsBefore;

      const row = await statsFor('SELECT pg_catalog.sum(pg_catalog.length(pad)) FROM public.big', (r) => r.calls === 1);
      // Written in the same flush as the statement's row.
      const { rows: backends } = await admin.query('SELECT cgroup FROM bpf_stats.backend_stats WHERE pid = $1 AND exited_at IS NULL', [
        nsPid,
      ]);
      const after = await reclaimed();
      const backendPages = after.backend - before.backend;
      const containerPages = after.container - before.container;
      console.log(
        `container limit ${MEMORY_LIMIT / MB} MB, relation ${(big.bytes / MB).toFixed(0)} MB, cgroup grew ${(grown / MB).toFixed(1)} MB, ` +
          `limit hit ${limitHits} times: expected ~${expected.toFixed(0)} pages reclaimed; statement reclaim_pages ${row.reclaim_pages} ` +
          `(${(row.reclaim_pages / expected).toFixed(3)}), backend ${backendPages}, container ${containerPages} ` +
          `(${(containerPages / expected).toFixed(3)}); reclaim_ms ${row.reclaim_ms.toFixed(1)} of ${row.total_time_ms.toFixed(0)}`,
      );
      expect(limitHits).toBeGreaterThan(0);
      expect(expected).toBeGreaterThan(big.bytes / 4096 / 3);
      expect(backends).toHaveLength(1);
      expect(backends[0].cgroup).toBe(cgroupPath);
      // The backend reclaimed only in this statement meanwhile.
      expect(backendPages).toBe(row.reclaim_pages);
      expect(row.reclaim_pages / expected).toBeGreaterThan(0.95);
      expect(row.reclaim_pages / expected).toBeLessThan(1.05);
      expect(containerPages / expected).toBeGreaterThan(0.95);
      expect(containerPages / expected).toBeLessThan(1.05);
      expect(row.reclaim_ms).toBeGreaterThan(0);
      expect(row.reclaim_ms).toBeLessThan(row.total_time_ms);
    } finally {
      await client.end();
    }
  });
});
