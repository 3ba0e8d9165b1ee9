import { HistKind, Structs } from '../../src/bpf/contract.js';
import { existsSync, readFileSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KernelFeatures } from '../../src/collector/kernel-features.js';
import { evictFromPageCache } from '../../src/cluster/evict-from-page-cache.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { dumpOwnMap } from '../support/own-bpf.js';
import { unseenCompletions } from '../support/unseen-completions.js';
import { TraceInstance, type TraceEvent } from '../support/trace-instance.js';
import { statsFor as sharedStatsFor } from '../support/stats-for.js';

/*
 * The memory and IO families against a real cluster, checked against the kernel's own
 * accounting, never against the collector: a memcg's limit and its uncharge counter, ftrace's
 * block and writeback events (a separate mechanism from the BPF programs), and the relation's
 * size from pg_relation_size.
 */
let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let relationBytes = 0;
/** The table's data file (it is under 1 GB: one segment). */
let coldPath = '';
/** A session that was already idle when the collector attached. */
let early: pg.Client;
let earlyPid = 0;
const logged: string[] = [];
const TMPFS_MAGIC = 0x01021994;
const MB = 1024 * 1024;

async function connect(): Promise<pg.Client> {
  const client = new pg.Client(cluster.connectionString());
  await client.connect();
  // One process per statement: the ground truths below follow one pid.
  await client.query('SET max_parallel_workers_per_gather = 0');
  return client;
}

async function backendPid(client: pg.Client): Promise<number> {
  return (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
}

/** query_stats for the one statement matching `pattern`, beside pg_stat_statements' figures. */
function statsFor(pattern: string) {
  return sharedStatsFor(admin, sidecar, pattern);
}

async function backendThrottle(pid: number): Promise<number> {
  const { rows } = await admin.query(
    'SELECT writeback_throttle_ms FROM bpf_stats.backend_stats WHERE pid = $1 ORDER BY backend_start DESC LIMIT 1',
    [pid],
  );
  expect(rows).toHaveLength(1);
  return rows[0].writeback_throttle_ms;
}

/**
 * Ground truth from ftrace: the data requests `pid` started on `device` whose rwbs has `op`
 * ('R' or 'W'), their bytes, and how many completions ran in another task's context. A request
 * counts with the bytes its completion reported, or, when ftrace lost the completion event (it
 * drops an event now and then when one completion interrupts another), the bytes it started
 * with. Empty flush requests are no data and count as none.
 */
function requestBytes(events: TraceEvent[], pid: number, device: string, op: 'R' | 'W') {
  // Request structs (and so sectors) are reused: each completion belongs to the last start.
  const open = new Map<string, number>(); // sector -> bytes at start, for this pid's requests
  let bytes = 0;
  let elsewhere = 0;
  let requests = 0;
  for (const e of events) {
    const start = e.event === 'block_io_start' && e.fields.match(/^(\d+,\d+) (\S+) (\d+) \(.*?\) (\d+) \+ \d+/);
    if (start && start[1] === device) {
      if (open.has(start[4]!)) bytes += open.get(start[4]!)!; // its completion was not seen
      if (e.pid === pid && start[2]!.includes(op) && Number(start[3]) > 0) {
        open.set(start[4]!, Number(start[3]));
        requests++;
      } else {
        open.delete(start[4]!);
      }
    }
    const done = e.event === 'block_rq_complete' && e.fields.match(/^(\d+,\d+) (\S+) \(.*?\) (\d+) \+ (\d+)/);
    if (done && done[1] === device && open.has(done[3]!) && Number(done[4]) > 0) {
      open.delete(done[3]!);
      bytes += Number(done[4]) * 512;
      if (e.pid !== pid) elsewhere++;
    }
  }
  for (const started of open.values()) bytes += started;
  return { bytes, requests, elsewhere };
}

const KIND_OFFSET = Structs.hist_key.fields.kind.offset;
const HIST_SLOTS = Structs.hist.fields.slots.count;

/** Observations in the query's block IO latency histogram (struct hist_key / struct hist), all CPUs. */
function ioLatencyObservations(queryid: bigint): number {
  let n = 0;
  for (const { key, values } of dumpOwnMap('histograms')) {
    if (key.readBigInt64LE(0) !== queryid || key.readUInt32LE(KIND_OFFSET) !== HistKind.HIST_IO) continue;
    for (const v of values) for (let slot = 0; slot < HIST_SLOTS; slot++) n += Number(v.readBigUInt64LE(slot * 8));
  }
  return n;
}

/** A backend's own row (its latest incarnation of `pid`). */
async function backendRow(pid: number) {
  await sidecar.flush();
  const { rows } = await admin.query('SELECT * FROM bpf_stats.backend_stats WHERE pid = $1 ORDER BY backend_start DESC LIMIT 1', [pid]);
  expect(rows).toHaveLength(1);
  return rows[0];
}

/** Sum of the balance_dirty_pages pauses ftrace recorded; it prints each in ms (pause * 1000 / HZ). */
function pausedMs(events: TraceEvent[]): number {
  return events
    .map((e) => Number(e.fields.match(/ pause=(-?\d+) /)?.[1] ?? 0))
    .filter((ms) => ms > 0)
    .reduce((a, b) => a + b, 0);
}

/**
 * Takes the table's file out of the page cache (posix_fadvise DONTNEED through dd), so the next
 * read of it comes from the disk; the rest of the host's cache is left alone.
 */
function evictTable(): void {
  expect(evictFromPageCache(coldPath), 'bytes of the relation still cached').toBe(0);
}

/** "major,minor" of the block device holding `path`, as block events print it. */
function blockDevice(path: string): string {
  const dev = statSync(path).dev;
  return `${(dev >> 8) & 0xfff},${(dev & 0xff) | ((dev >> 12) & 0xfff00)}`;
}

beforeAll(async () => {
  // A small shared_buffers, so a table scan is mostly reads from the kernel; fsync on, so a
  // commit makes the backend write its WAL to the disk itself.
  cluster = await ThrowawayCluster.start({ settings: { shared_buffers: "'16MB'", fsync: 'on' } });
  expect(statfsSync(cluster.dataDir).type, 'the data directory must be on a real disk, not tmpfs').not.toBe(TMPFS_MAGIC);
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query("CREATE TABLE cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 400000) g");
  // Hint bits set now, so the measured scans only read (no dirtied pages written back).
  await admin.query('VACUUM (FREEZE) cold');
  await admin.query('CREATE TABLE dirty (id int, pad text)');
  await admin.query('CHECKPOINT');
  relationBytes = Number((await admin.query("SELECT pg_relation_size('cold') AS n")).rows[0].n);
  coldPath = join(cluster.dataDir, (await admin.query("SELECT pg_relation_filepath('cold') AS p")).rows[0].p);
  await admin.end();
  // An empty shared_buffers: the scans below have to ask the kernel for every page.
  await cluster.restart();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  early = await connect();
  earlyPid = await backendPid(early);
  await early.query('EXPLAIN SELECT count(id) FROM cold');
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, log: (line) => logged.push(line) });
});

afterAll(async () => {
  await early?.end();
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('memory and IO families on a real cluster', () => {
  it('attaches both sets by default on this kernel', () => {
    expect(KernelFeatures.host().missingTracepoint(['block_io_start', 'mm_vmscan_memcg_reclaim_end', 'balance_dirty_pages'])).toBeNull();
    expect(sidecar.attached()).toEqual(expect.arrayContaining(['cpu', 'memory', 'io']));
  });

  it("charges a cold scan's block reads to its query, as ftrace saw them, even when completed in other contexts", async () => {
    const client = await connect();
    try {
      const pid = await backendPid(client);
      await client.query('EXPLAIN SELECT count(*) FROM cold'); // catalogs cached before the caches go
      const device = blockDevice(cluster.dataDir);
      // Twice: a request whose completion no BPF program saw in the first run is charged when
      // the second run reuses its struct; the sums must agree either way.
      let tracedBytes = 0;
      let tracedRequests = 0;
      for (let run = 1; run <= 2; run++) {
        evictTable();
        const trace = TraceInstance.create('pgbpf-io', ['block/block_io_start', 'block/block_rq_complete'], 16384);
        let events: TraceEvent[];
        try {
          await client.query('SELECT count(*) FROM cold');
        } finally {
          events = trace.stop();
        }
        const traced = requestBytes(events, pid, device, 'R');
        tracedBytes += traced.bytes;
        tracedRequests += traced.requests;
        const unseen = unseenCompletions(pid); // not charged yet (see unseenCompletions)
        const row = await statsFor('SELECT count(*) FROM cold');
        const read = Number(row.blk_read_bytes);
        const observed = ioLatencyObservations(BigInt(row.queryid));
        console.log(
          `cold scan ${run}: relation ${relationBytes} B; blk_read_bytes ${read} in ${row.blk_read_ios} requests so far, ` +
            `ftrace ${tracedBytes} B over ${tracedRequests} (${traced.elsewhere} of ${traced.requests} completed in another task's context); ` +
            `completions no BPF program saw: ${unseen.requests} pending (${unseen.bytes} B), ${Number(row.blk_read_ios) - observed} charged late; ` +
            `io_wait_ms ${row.io_wait_ms.toFixed(1)}`,
        );
        // The whole relation had to come from the disk (shared_buffers empty, page cache
        // dropped), and not much more: readahead stops at the end of the file, so the slack is
        // the few catalog and free-space-map pages the executor touched.
        expect(traced.bytes).toBeGreaterThan(0.9 * relationBytes);
        expect(traced.bytes).toBeLessThan(1.1 * relationBytes + 2 * MB);
        // Every byte ftrace saw complete is charged to the query, or pending as unseen.
        expect(read + unseen.bytes).toBe(tracedBytes);
        expect(Number(row.blk_read_ios) + unseen.requests).toBe(tracedRequests);
        // Completions ran in interrupt context on whatever task was current, yet were charged here.
        expect(traced.elsewhere).toBeGreaterThan(0);
        expect(row.io_wait_ms).toBeGreaterThan(0);
        expect(Number(row.blk_write_bytes)).toBe(0);
        // One latency observation per completed read the programs saw (none for late charges).
        expect(observed).toBeLessThanOrEqual(Number(row.blk_read_ios));
        expect(observed).toBeGreaterThanOrEqual(Number(row.blk_read_ios) - tracedRequests * 0.1);
        // The backend's own row holds the same reads (and at most the few before the trace).
        const backend = await backendRow(pid);
        expect(Number(backend.blk_read_bytes) + unseen.bytes).toBeGreaterThanOrEqual(tracedBytes);
        expect(Number(backend.blk_read_bytes)).toBeLessThan(tracedBytes + 2 * MB);
      }
    } finally {
      await client.end();
    }
  });

  it('charges the reads of a backend that slept through the attach', async () => {
    const pid = earlyPid;
    const device = blockDevice(cluster.dataDir);
    evictTable();
    // A backend idle since before the collector attached, and not switched out since: the
    // programs learn who it is only when it wakes for this query and submits its first read.
    const trace = TraceInstance.create('pgbpf-early', ['block/block_io_start', 'block/block_rq_complete'], 16384);
    let events: TraceEvent[];
    try {
      await early.query('SELECT count(id) FROM cold');
    } finally {
      events = trace.stop();
    }
    const traced = requestBytes(events, pid, device, 'R');
    const unseen = unseenCompletions(pid);
    const row = await statsFor('SELECT count(id) FROM cold');
    expect(traced.bytes).toBeGreaterThan(0.9 * relationBytes);
    expect(Number(row.blk_read_bytes) + unseen.bytes).toBe(traced.bytes);
    expect(Number(row.blk_read_ios) + unseen.requests).toBe(traced.requests);
    // Usually this takes the path for processes without a record (the flush then logs
    // memio_untracked), unless the backend was switched out before its first read: not asserted.
  });

  it("charges the WAL a committing backend flushes to its statement's block writes, as ftrace saw them", async () => {
    const client = await connect();
    try {
      const pid = await backendPid(client);
      await client.query('CREATE TABLE IF NOT EXISTS journal (id int, note text)');
      const device = blockDevice(cluster.dataDir);
      const trace = TraceInstance.create('pgbpf-wr', ['block/block_io_start', 'block/block_rq_complete'], 8192);
      let events: TraceEvent[];
      try {
        await client.query('INSERT INTO journal SELECT g, md5(g::text) FROM generate_series(1, 20000) g');
      } finally {
        events = trace.stop();
      }
      const traced = requestBytes(events, pid, device, 'W');
      const unseen = unseenCompletions(pid);
      const row = await statsFor('INSERT INTO journal SELECT g, md5(g::text) FROM generate_series($1, $2) g');
      const written = Number(row.blk_write_bytes) + unseen.bytes;
      console.log(
        `commit: blk_write_bytes ${written} in ${row.blk_write_ios} requests, ftrace ${traced.bytes} B over ${traced.requests} requests ` +
          `(${traced.elsewhere} completed in another task's context)`,
      );
      // The commit's fdatasync wrote at least one WAL page from this backend.
      expect(traced.bytes).toBeGreaterThanOrEqual(8192);
      expect(Math.abs(written - traced.bytes)).toBeLessThan(0.01 * traced.bytes + 64 * 1024);
      expect(Number(row.blk_write_ios) + unseen.requests).toBe(traced.requests);
    } finally {
      await client.end();
    }
  });

  it('gives a scan bigger than its memory cgroup reclaim time and the pages the memcg gave back', async () => {
    expect(MemoryCgroup.available(), 'cgroup v1 memory controller').toBe(true);
    const client = await connect();
    const limit = 64 * MB;
    const cgroup = MemoryCgroup.create('pgbpf-memcg', limit);
    try {
      await client.query('EXPLAIN SELECT sum(length(pad)) FROM cold');
      const pid = await backendPid(client);
      cgroup.add(pid);
      evictTable();
      const usageBefore = cgroup.usage();
      const failsBefore = cgroup.failcnt();
      const started = performance.now();
      await client.query('SELECT sum(length(pad)) FROM cold');
      const wallMs = performance.now() - started;
      // The whole relation was read into the page cache and charged to the memcg; what it holds
      // now beyond what it held before is what was not reclaimed.
      const grown = cgroup.usage() - usageBefore;
      const expected = (relationBytes - grown) / 4096;

      const row = await statsFor('SELECT sum(length(pad)) FROM cold');
      const pages = Number(row.reclaim_pages);
      console.log(
        `memcg ${limit / MB} MB, relation ${(relationBytes / MB).toFixed(0)} MB, memcg grew ${(grown / MB).toFixed(1)} MB, ` +
          `limit hit ${cgroup.failcnt() - failsBefore} times: reclaim_pages ${pages} (expected ~${expected.toFixed(0)}), ` +
          `reclaim_ms ${row.reclaim_ms.toFixed(1)} of ${wallMs.toFixed(0)} ms wall, on_cpu_ms ${row.on_cpu_ms.toFixed(1)}`,
      );
      expect(cgroup.failcnt()).toBeGreaterThan(failsBefore);
      // Pages reclaimed = pages charged (the relation, plus a little private memory) - growth.
      // Pages the eviction could not drop (another cgroup still had them cached) are never
      // charged here, so fewer can be reclaimed than that; never more.
      expect(pages).toBeGreaterThan(0.5 * expected);
      expect(pages).toBeLessThan(1.1 * expected + 512);
      expect(row.reclaim_ms).toBeGreaterThan(0);
      // An overlay inside the statement's time, not an extra component of it.
      expect(row.reclaim_ms).toBeLessThan(row.total_time_ms);
      expect(row.reclaim_ms).toBeLessThan(wallMs);
      // The session reclaimed nothing before it joined the cgroup: its backend row says the same.
      const backend = await backendRow(pid);
      expect(Number(backend.reclaim_pages)).toBe(pages);
      expect(backend.reclaim_ms).toBeCloseTo(row.reclaim_ms, 6);
    } finally {
      await client.end();
      cgroup.remove();
    }
  });

  it('gives a heavy writer the writeback throttling pauses the kernel imposed on it', async () => {
    const client = await connect();
    const pid = await backendPid(client);
    // pg_stat_statements writes a new statement's text to a file before the query id is
    // published, and that write may be throttled too (it then counts for the backend only):
    // the statement runs once first, so the measured run is all query.
    await client.query("INSERT INTO dirty SELECT g, repeat('y', 200) FROM generate_series(1, 10) g");
    const queryBefore = (await statsFor('INSERT INTO dirty SELECT g, repeat($1, $2) FROM generate_series($3, $4) g')).writeback_throttle_ms;
    const backendBefore = await backendThrottle(pid);
    const dirtyRatio = readFileSync('/proc/sys/vm/dirty_ratio', 'utf8').trim();
    const dirtyBytes = readFileSync('/proc/sys/vm/dirty_bytes', 'utf8').trim();
    const backgroundRatio = readFileSync('/proc/sys/vm/dirty_background_ratio', 'utf8').trim();
    const backgroundBytes = readFileSync('/proc/sys/vm/dirty_background_bytes', 'utf8').trim();
    const trace = TraceInstance.create('pgbpf-wb', ['writeback/balance_dirty_pages'], 4096, {
      'writeback/balance_dirty_pages': `common_pid == ${pid}`,
    });
    let events: TraceEvent[] = [];
    let wallMs = 0;
    let runs = 0;
    try {
      // A tiny dirty limit for a few seconds, so the writer outruns writeback; restored below.
      // The flusher starts late (background 3 of 4 MB), so the writer soon meets the limit.
      writeFileSync('/proc/sys/vm/dirty_bytes', String(4 * MB));
      writeFileSync('/proc/sys/vm/dirty_background_bytes', String(3 * MB));
      // How fast this shared disk drains varies: write again (at most 4 times) until throttled.
      while (runs < 4 && pausedMs(trace.events()) < 50) {
        const started = performance.now();
        await client.query("INSERT INTO dirty SELECT g, repeat('y', 200) FROM generate_series(1, 400000) g");
        wallMs += performance.now() - started;
        runs++;
      }
    } finally {
      // Writing a ratio resets the bytes form and vice versa: restore whichever was in force.
      writeFileSync(`/proc/sys/vm/${dirtyBytes !== '0' ? 'dirty_bytes' : 'dirty_ratio'}`, dirtyBytes !== '0' ? dirtyBytes : dirtyRatio);
      writeFileSync(
        `/proc/sys/vm/${backgroundBytes !== '0' ? 'dirty_background_bytes' : 'dirty_background_ratio'}`,
        backgroundBytes !== '0' ? backgroundBytes : backgroundRatio,
      );
      events = trace.stop();
      await client.end();
    }
    const paused = pausedMs(events);
    const row = await statsFor('INSERT INTO dirty SELECT g, repeat($1, $2) FROM generate_series($3, $4) g');
    const queryMs = row.writeback_throttle_ms - queryBefore;
    const backendMs = (await backendThrottle(pid)) - backendBefore;
    console.log(
      `writer (${runs} runs): writeback_throttle_ms query ${queryMs.toFixed(1)}, backend ${backendMs.toFixed(1)}; ftrace pauses ${paused} ms in ` +
        `${events.length} rounds; io_wait_ms ${row.io_wait_ms.toFixed(1)}, wall ${wallMs.toFixed(0)} ms`,
    );
    expect(paused, 'the kernel throttled the writer').toBeGreaterThan(20);
    // Each pause is a whole number of jiffies, which ftrace prints in ms: equal up to rounding.
    expect(Math.abs(backendMs - paused)).toBeLessThan(0.02 * paused + 8);
    expect(Math.abs(queryMs - paused)).toBeLessThan(0.02 * paused + 8);
    expect(queryMs).toBeLessThan(wallMs);
    // The pauses are IO sleeps: the cpu set's io_wait_ms already holds them (an overlay).
    expect(row.io_wait_ms).toBeGreaterThan(0.8 * queryMs);
  });

  it('shows the families in query_memory and query_io with the query text', async () => {
    await sidecar.flush();
    const memory = await admin.query("SELECT * FROM bpf_stats.query_memory WHERE query LIKE 'SELECT sum(length(pad)) FROM cold%'");
    expect(memory.rows).toHaveLength(1);
    expect(Number(memory.rows[0].reclaim_pages)).toBeGreaterThan(0);
    expect(memory.rows[0].reclaim_fraction).toBeGreaterThan(0);
    const io = await admin.query("SELECT * FROM bpf_stats.query_io WHERE query = 'SELECT count(*) FROM cold'");
    expect(io.rows).toHaveLength(1);
    // Average request size: at most the device's largest request.
    const sys = `/sys/dev/block/${blockDevice(cluster.dataDir).replace(',', ':')}`;
    const queue = existsSync(`${sys}/queue`) ? `${sys}/queue` : `${sys}/../queue`; // a partition's disk
    const maxKb = Number(readFileSync(`${queue}/max_sectors_kb`, 'utf8'));
    expect(io.rows[0].avg_read_bytes).toBeGreaterThan(4096);
    expect(io.rows[0].avg_read_bytes).toBeLessThanOrEqual(maxKb * 1024);
  });
});
