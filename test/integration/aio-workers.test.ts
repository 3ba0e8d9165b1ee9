import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { aioUnsupportedReason } from '../../src/families/io/aio-probe-set.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';
import { statsFor as sharedStatsFor } from '../support/stats-for.js';
import { unseenCompletions } from '../support/unseen-completions.js';

/*
 * PostgreSQL 18 with its default io_method = worker: a backend's reads are performed by the io
 * workers, so the block requests are created in the workers' context. The aio set charges
 * them to the backend that submitted them and to the query it is on. Ground truth the
 * collector did not compute: the relation's size (pg_relation_size; dropped from shared
 * buffers and from the page cache before the scan, so the scan reads all of it from the disk),
 * and pg_stat_io's own count of the bytes client backends read.
 *
 * Both caches must be emptied. A quarter of each table stays in shared buffers after its
 * creation; a scan skips those blocks, and the disk read them anyway only when the kernel's
 * readahead happened to cover them. Reads spread over three io workers (each with its own file
 * and readahead state) did not always: one query in ~7 runs got 0.833 of its relation's bytes.
 */
let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let relationBytes = 0;
const logged: string[] = [];

/** The bytes pg_stat_io has client backends reading from relations (all contexts). */
async function clientReadBytes(): Promise<number> {
  await admin.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await admin.query(
    `SELECT coalesce(sum(read_bytes), 0)::bigint AS n FROM pg_stat_io WHERE backend_type = 'client backend' AND object = 'relation'`,
  );
  return Number(rows[0].n);
}

/** Drops `table` from shared buffers and from the page cache: a scan must read every block from the disk. */
async function evictCold(table: string): Promise<void> {
  const { rows } = await admin.query(
    `SELECT e.buffers_skipped, pg_relation_filepath($1::regclass) AS path
       FROM pg_buffercache_evict_relation($1::regclass) e`,
    [table],
  );
  expect(rows[0].buffers_skipped, `buffers of ${table} left in shared buffers`).toBe(0);
  expect(evictFromPageCache(join(cluster.dataDir, rows[0].path)), `bytes of ${table} still cached`).toBe(0);
}

/** The io workers' own rows in backend_stats, summed (live workers, as pg_stat_activity lists them). */
async function workerReadBytes(): Promise<number> {
  await sidecar.flush();
  const { rows } = await admin.query(
    `SELECT coalesce(sum(b.blk_read_bytes), 0)::bigint AS n
       FROM bpf_stats.backend_stats b JOIN pg_stat_activity a ON a.pid = b.pid
      WHERE a.backend_type = 'io worker' AND b.exited_at IS NULL`,
  );
  return Number(rows[0].n);
}

describe('PostgreSQL 18 io workers (io_method = worker, the default)', () => {
  beforeAll(async () => {
    // Small shared buffers: the scan goes through a ring and asks for every page.
    cluster = await ThrowawayCluster.start({ pgBin: embeddedPostgresBin(18), settings: { shared_buffers: "'16MB'" } });
    admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    await admin.query('CREATE EXTENSION pg_buffercache');
    await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 200000) g");
    await admin.query('VACUUM (FREEZE) cold');
    for (const t of ['cold_a', 'cold_b', 'cold_c']) {
      await admin.query(`CREATE TABLE ${t} AS SELECT g AS id, repeat('y', 200) AS pad FROM generate_series(1, 60000) g`);
      await admin.query(`VACUUM (FREEZE) ${t}`);
    }
    await admin.query('CHECKPOINT');
    relationBytes = Number((await admin.query("SELECT pg_relation_size('cold') AS n")).rows[0].n);
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs: 3_600_000,
      log: (line) => logged.push(line),
    });
  }, 120_000);

  afterAll(async () => {
    await sidecar?.stop();
    await admin?.end();
    await cluster?.stop();
  });

  it('runs with the default io_method = worker and attaches the aio set by default', async () => {
    expect((await admin.query('SHOW io_method')).rows[0].io_method).toBe('worker');
    expect(sidecar.attached()).toEqual(expect.arrayContaining(['io', 'aio']));
  });

  it('finds both functions in the 18 build, and names them where a build lacks them', () => {
    const pg18 = `${embeddedPostgresBin(18)}/postgres`;
    const pg17 = `${embeddedPostgresBin(17)}/postgres`;
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'worker', binaryPath: pg18 })).toBeNull();
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'worker', binaryPath: pg17 })).toBe(
      `${pg17} has no pgaio_worker_submit, no one direct call of pgaio_io_perform_synchronously in IoWorkerMain`,
    );
  });

  it("charges a cold scan's reads, performed by the io workers, to its query: the relation's size, as pg_stat_io read it", async () => {
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    try {
      await client.query('SET max_parallel_workers_per_gather = 0'); // one backend owns every IO
      await client.query('EXPLAIN SELECT count(pad) FROM cold'); // catalogs cached first
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const workersBefore = await workerReadBytes();
      const pgStatIoBefore = await clientReadBytes();
      await evictCold('cold');
      await client.query('SELECT count(pad) FROM cold');
      // pg_stat_io gets a backend's counts when it goes idle; force this session's now.
      await client.query('SELECT pg_stat_force_next_flush()');
      await client.query('SELECT 1');
      const pgStatIo = (await clientReadBytes()) - pgStatIoBefore;
      const unseen = unseenCompletions(pid); // charged once their request structs are reused
      const row = await sharedStatsFor(admin, sidecar, 'SELECT count(pad) FROM cold');
      const workers = (await workerReadBytes()) - workersBefore;
      const backend = (await admin.query('SELECT blk_read_bytes FROM bpf_stats.backend_stats WHERE pid = $1 AND exited_at IS NULL', [pid]))
        .rows[0];
      const read = Number(row.blk_read_bytes);
      console.log(
        `PG 18 cold scan: relation ${relationBytes} B, pg_stat_io client reads ${pgStatIo} B; query blk_read_bytes ${read} ` +
          `(${(read / relationBytes).toFixed(3)}x) in ${row.blk_read_ios} requests, ${unseen.bytes} B in ${unseen.requests} completed unseen so far; ` +
          `its backend ${backend.blk_read_bytes} B; io workers' own rows +${workers} B`,
      );
      // pg_stat_io: with nothing in shared buffers, the backend read every block of the relation,
      // and with nothing in the page cache the disk read them all.
      expect(pgStatIo / relationBytes).toBeGreaterThan(0.99);
      // The query and its backend carry the reads, whoever performed them (or will, once a
      // completion no program saw is charged).
      expect((read + unseen.bytes) / relationBytes).toBeGreaterThan(0.99);
      expect((read + unseen.bytes) / relationBytes).toBeLessThan(1.01);
      expect(read + unseen.bytes).toBeGreaterThanOrEqual(0.97 * pgStatIo);
      expect(Number(backend.blk_read_bytes)).toBeGreaterThanOrEqual(read);
      // The io workers keep their own rows (as pg_stat_io keeps theirs): they performed most of
      // it, never more than the query got (an IO the backend performs itself is not theirs).
      expect(workers).toBeGreaterThan(0.5 * relationBytes);
      expect(workers).toBeLessThanOrEqual(read);
    } finally {
      await client.end();
    }
  });

  it("keeps each backend's reads apart when the same workers serve three cold scans at once", async () => {
    const tables = ['cold_a', 'cold_b', 'cold_c'];
    const clients = await Promise.all(
      tables.map(async () => {
        const c = new pg.Client(cluster.connectionString());
        await c.connect();
        await c.query('SET max_parallel_workers_per_gather = 0');
        return c;
      }),
    );
    try {
      const sizes: number[] = [];
      for (const [i, t] of tables.entries()) {
        await clients[i]!.query(`EXPLAIN SELECT count(pad) FROM ${t}`);
        sizes.push(Number((await admin.query('SELECT pg_relation_size($1::regclass) AS n', [t])).rows[0].n));
        await evictCold(t);
      }
      await Promise.all(tables.map((t, i) => clients[i]!.query(`SELECT count(pad) FROM ${t}`)));
      const pids = await Promise.all(clients.map(async (c) => (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number));
      const unseenOf = pids.map((pid) => unseenCompletions(pid));
      for (const [i, t] of tables.entries()) {
        const row = await sharedStatsFor(admin, sidecar, `SELECT count(pad) FROM ${t}`);
        const unseen = unseenOf[i]!;
        const ratio = (Number(row.blk_read_bytes) + unseen.bytes) / sizes[i]!;
        console.log(
          `concurrent cold scan of ${t}: relation ${sizes[i]} B, query blk_read_bytes ${row.blk_read_bytes} + ${unseen.bytes} B completed unseen (${ratio.toFixed(3)}x)`,
        );
        // Each backend's query got its own relation's reads: none of another's, none lost to
        // the workers.
        expect(ratio).toBeGreaterThan(0.99);
        expect(ratio).toBeLessThan(1.01);
      }
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });
});
