import type pg from 'pg';
import { expect } from 'vitest';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { hostPidOf } from './namespaced-cluster.js';
import { unseenCompletions } from './unseen-completions.js';

const MB = 1024 * 1024;

/** What a containerized PostgreSQL 17 and the collector beside it give a cold read. */
export interface ColdReadPlacement {
  /** A superuser session with pg_stat_statements and pg_buffercache in schema public. */
  admin: pg.Client;
  /** A new session to the same server. */
  connect: () => Promise<pg.Client>;
  /** The postmaster as the host numbers it: its files are reached through its root. */
  postmasterHostPid: number;
  /** The collector as the host numbers it: whose io_inflight map to read. */
  collectorHostPid: number;
  /** A table of public, written and frozen beforehand, small enough to stay cached once read. */
  table: string;
  /** Other tables to take out of the page cache first (one bigger than a memory limit). */
  alsoUncached?: string[];
  /**
   * Where the collector runs no query set (no call to wait for): resolves once the flushes after
   * the statement are written.
   */
  flushed?: () => Promise<void>;
}

interface ColdReadRow {
  calls: number;
  shared_blks_read: number;
  blk_read_bytes: number;
}

/** The table's size, and its data file as the host reaches it (under 1 GB: one segment). */
async function relationFile(admin: pg.Client, table: string, postmasterHostPid: number): Promise<{ bytes: number; path: string }> {
  const { rows } = await admin.query(
    `SELECT pg_catalog.pg_relation_size($1::regclass)::float8 AS bytes,
            pg_catalog.current_setting('data_directory') || '/' || pg_catalog.pg_relation_filepath($1::regclass) AS path`,
    [`public.${table}`],
  );
  return { bytes: rows[0].bytes, path: `/proc/${postmasterHostPid}/root${rows[0].path}` };
}

/**
 * Reads `table` once with none of it in shared buffers (pg_buffercache_evict, PostgreSQL 17)
 * nor in the page cache, and checks the statement's block-IO read bytes against ground truth
 * from PostgreSQL and the file system: pg_stat_statements' shared_blks_read is the whole
 * relation (every block came from a read), and the collector charged within 2% of
 * pg_relation_size, and no more than it plus 2 MB of readahead and catalog pages.
 */
export async function expectColdReadCharged(placement: ColdReadPlacement): Promise<void> {
  const { admin, postmasterHostPid, collectorHostPid, table } = placement;
  const query = `SELECT pg_catalog.count(pad) FROM public.${table}`;
  const relation = await relationFile(admin, table, postmasterHostPid);
  const client = await placement.connect();
  let unseen = { bytes: 0, requests: 0 };
  try {
    // One process reads: a parallel worker's completions would be its own, not the backend's.
    await client.query('SET max_parallel_workers_per_gather = 0');
    await client.query(`EXPLAIN ${query}`); // catalogs cached first
    const { rows: buffers } = await admin.query(
      `SELECT pg_catalog.count(*) FILTER (WHERE NOT public.pg_buffercache_evict(bufferid))::int AS kept FROM public.pg_buffercache
        WHERE relfilenode = pg_catalog.pg_relation_filenode($1::regclass)
          AND reldatabase = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())`,
      [`public.${table}`],
    );
    expect(buffers[0].kept, 'buffers of the relation still pinned').toBe(0);
    for (const other of placement.alsoUncached ?? []) {
      const file = await relationFile(admin, other, postmasterHostPid);
      expect(evictFromPageCache(file.path), `bytes of ${other} still cached`).toBe(0);
    }
    expect(evictFromPageCache(relation.path), 'bytes of the relation still cached').toBe(0);
    await client.query(query);
    const nsPid = (await client.query('SELECT pg_catalog.pg_backend_pid() AS pid')).rows[0].pid as number;
    // Completions no program saw are charged when their request struct is reused: later.
    unseen = unseenCompletions(hostPidOf(nsPid, postmasterHostPid), collectorHostPid);
  } finally {
    await client.end();
  }
  await placement.flushed?.();
  let row: ColdReadRow | undefined;
  await expect
    .poll(
      async () => {
        const { rows } = await admin.query<ColdReadRow>(
          `SELECT q.calls::float8 AS calls, s.shared_blks_read::float8 AS shared_blks_read, q.blk_read_bytes::float8 AS blk_read_bytes
             FROM public.pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query = $1`,
          [query],
        );
        row = rows[0];
        return rows.length === 1 && (placement.flushed !== undefined || row!.calls === 1) && row!.blk_read_bytes > 0;
      },
      { timeout: 15_000, interval: 250 },
    )
    .toBe(true);
  const blockSize = Number((await admin.query("SELECT pg_catalog.current_setting('block_size') AS b")).rows[0].b);
  const scanRead = row!.shared_blks_read * blockSize;
  const charged = row!.blk_read_bytes + unseen.bytes;
  console.log(
    `cold read in a container: relation ${relation.bytes} B, read by the scan ${scanRead} B (shared_blks_read); ` +
      `query blk_read_bytes ${row!.blk_read_bytes}, ${unseen.bytes} B in ${unseen.requests} completed unseen so far: ${(charged / relation.bytes).toFixed(3)} of the relation`,
  );
  expect(scanRead).toBe(relation.bytes);
  expect(charged / relation.bytes).toBeGreaterThan(0.98);
  // Readahead stops at the end of the file: beyond it only the few catalog pages the scan touched.
  expect(charged).toBeLessThan(relation.bytes + 2 * MB);
}
