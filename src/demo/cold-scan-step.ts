import { statfsSync } from 'node:fs';
import type pg from 'pg';
import { evictFromPageCache } from '../cluster/evict-from-page-cache.js';
import { MemoryCgroup } from '../cluster/memory-cgroup.js';
import { oneLine } from '../errors.js';
import { backendPid } from '../storage/backend-pid.js';
import { withClient } from './with-client.js';
import type { WorkloadContext, WorkloadStep } from './workload-context.js';

const MB = 1024 * 1024;
/** The memory cgroup's limit: well below demo_cold, so its scan must reclaim its own page cache. */
const MEMCG_LIMIT_BYTES = 24 * MB;
const TMPFS_MAGIC = 0x01021994;
export const IO_QUERY = 'SELECT count(*) FROM public.demo_cold';
export const MEMORY_QUERY = 'SELECT sum(length(pad)) FROM public.demo_cold';

const mb = (bytes: number) => (bytes / MB).toFixed(1);
const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** A session for one scan: one process (no parallel workers), a bounded statement time. */
async function prepareSession(c: pg.Client, query: string): Promise<void> {
  await c.query('SET max_parallel_workers_per_gather = 0');
  await c.query("SET statement_timeout = '60s'");
  // Catalogs and the plan's relcache entries are loaded now, not during the measured scan.
  await c.query(`EXPLAIN ${query}`);
}

async function timed(c: pg.Client, query: string): Promise<number> {
  const started = performance.now();
  await c.query(query);
  return performance.now() - started;
}

/** Block IO: the whole relation read from the disk, once. */
async function ioScan({ dsn, facts, print }: WorkloadContext): Promise<void> {
  const { cold } = facts;
  if (statfsSync(cold.path).type === TMPFS_MAGIC) {
    facts.io = { skipped: `${cold.path} is on tmpfs: no block device to read from` };
    print(`io: skipped: ${facts.io.skipped}`);
    return;
  }
  await withClient(dsn, async (c) => {
    await prepareSession(c, IO_QUERY);
    const stillCached = evictFromPageCache(cold.path);
    const sharedBuffers = (await c.query("SELECT current_setting('shared_buffers') AS s")).rows[0].s;
    const scanMs = await timed(c, IO_QUERY);
    facts.io = { query: IO_QUERY, scanMs };
    print(
      `io: ${cold.name} is ${cold.bytes} bytes (${mb(cold.bytes)} MB, pg_relation_size; shared_buffers ${sharedBuffers}); ` +
        `taken out of the page cache${stillCached ? ` (${stillCached} bytes of it stayed)` : ''} and scanned by "${IO_QUERY}" in ${seconds(scanMs)} s`,
    );
  });
}

/** Memcg reclaim: the same relation scanned by a backend in a memory cgroup smaller than it. */
async function memoryScan({ dsn, facts, print, onCleanup }: WorkloadContext): Promise<void> {
  const { cold } = facts;
  const unavailable = MemoryCgroup.unavailableReason();
  if (unavailable) {
    facts.memory = { skipped: unavailable };
    print(`memory: skipped: ${unavailable}`);
    return;
  }
  await withClient(dsn, async (c) => {
    await prepareSession(c, MEMORY_QUERY);
    const pid = backendPid(c);
    const cgroup = MemoryCgroup.create('pg-bpf-stats-demo', MEMCG_LIMIT_BYTES);
    onCleanup(() => cgroup.remove());
    try {
      cgroup.add(pid);
      evictFromPageCache(cold.path);
      const usageBefore = cgroup.usage();
      const failsBefore = cgroup.failcnt();
      const scanMs = await timed(c, MEMORY_QUERY);
      // Everything the scan read was charged here; what the cgroup holds beyond what it held
      // before is what was not reclaimed, so the rest had to be (see memory-io.test.ts).
      const grownBytes = cgroup.usage() - usageBefore;
      const limitHits = cgroup.failcnt() - failsBefore;
      const expectedPages = Math.max(0, Math.round((cold.bytes - grownBytes) / 4096));
      facts.memory = { query: MEMORY_QUERY, pid, limitBytes: MEMCG_LIMIT_BYTES, grownBytes, limitHits, expectedPages, scanMs };
      print(
        `memory: backend ${pid} in a memory cgroup limited to ${mb(MEMCG_LIMIT_BYTES)} MB scanned ${cold.name} ` +
          `(${mb(cold.bytes)} MB) in ${seconds(scanMs)} s: limit hit ${limitHits} times, cgroup grew ${mb(grownBytes)} MB, ` +
          `so ~${expectedPages} pages had to be reclaimed`,
      );
    } finally {
      cgroup.remove();
    }
  });
}

/**
 * Reads demo_cold from the disk twice: once plainly (block IO equal to the relation's size),
 * once from a backend put in a cgroup v1 memory cgroup limited to well below its size (memcg reclaim).
 * A step that cannot run here says why and the demo goes on.
 */
export const coldScanStep: WorkloadStep = {
  label: `cold scan of demo_cold, bigger than shared_buffers (block IO), then again in a ${MEMCG_LIMIT_BYTES / MB} MB memory cgroup (memcg reclaim)`,
  run: async (context) => {
    for (const [family, step] of [
      ['io', ioScan],
      ['memory', memoryScan],
    ] as const) {
      try {
        await step(context);
      } catch (error) {
        context.facts[family] = { skipped: `failed: ${oneLine(error)}` };
        context.print(`${family}: step failed: ${oneLine(error)}`);
      }
    }
  },
};
