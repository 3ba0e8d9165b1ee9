import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { cliPath } from '../../src/package-root.js';
import { parseTextTable, type TextTable } from '../support/text-table.js';

const run = promisify(execFile);
const MB = 2 ** 20;
const MEMCG_V1 = '/sys/fs/cgroup/memory';
const demoCgroups = () => (existsSync(MEMCG_V1) ? readdirSync(MEMCG_V1).filter((d) => d.startsWith('pg-bpf-stats-demo-')) : []);
/** A hardware PMU shows up as the `cpu` (or hybrid `cpu_core`) event source; none on these VMs. */
const hasHardwarePmu = ['cpu', 'cpu_core', 'armv8_pmuv3'].some((d) => existsSync(`/sys/bus/event_source/devices/${d}`));

describe('pg-bpf-stats demo', () => {
  it('runs the embedded default end to end, reports every family it provokes next to its ground truth, and cleans up', async () => {
    const clustersBefore = readdirSync(tmpdir()).filter((d) => d.startsWith('pg-bpf-stats-'));
    const cgroupsBefore = demoCgroups();
    const started = performance.now();
    const { stdout } = await run(process.execPath, [cliPath(), 'demo', '--duration', '6s'], {
      timeout: 150_000,
    });
    const wallS = (performance.now() - started) / 1000;
    console.log(stdout);
    expect(stdout).toMatch(/\[5\/5\] report/);
    const lines = stdout.split('\n');
    /** The report section whose title line starts with `title`, up to the next blank line. */
    const section = (title: string): string[] => {
      const start = lines.findIndex((l) => l.startsWith(title));
      expect(start, `report section "${title}"`).toBeGreaterThanOrEqual(0);
      const end = lines.findIndex((l, i) => i > start && l.trim() === '');
      return lines.slice(start, end < 0 ? undefined : end);
    };
    const table = (title: string): TextTable => {
      const t = parseTextTable(section(title));
      expect(t, `a table in "${title}"`).not.toBeNull();
      return t!;
    };
    const row = (t: TextTable, pattern: RegExp): Record<string, string> => {
      const r = t.rows.find((x) => pattern.test(x.query ?? ''));
      expect(r, `row ${pattern} in ${JSON.stringify(t.rows.map((x) => x.query))}`).toBeDefined();
      return r!;
    };
    /** A number the demo printed as ground truth, from the first line matching `pattern`. */
    const printed = (pattern: RegExp): RegExpMatchArray => {
      const m = lines.map((l) => l.match(pattern)).find(Boolean);
      expect(m, `printed ${pattern}`).toBeTruthy();
      return m!;
    };

    // Every probe set is attached, or one line says why not.
    const attached = printed(/^\s+probe sets attached: (.*)$/)[1]!.split(', ');
    for (const set of ['cpu', 'memory', 'io', 'query', 'locks', 'lwlock', 'spinlock', 'latency', 'sched']) expect(attached).toContain(set);
    if (hasHardwarePmu) expect(attached).toContain('llc');
    else {
      expect(attached).not.toContain('llc');
      expect(stdout).toMatch(/^\s+llc: unsupported: no hardware PMU/m);
    }

    // Time decomposition. columns: query, pgss_calls, calls, pgss_exec_ms, total, on_cpu, runq, io, lock, lwlock, other
    const time = table('Where each query spent its time');
    const cpu = row(time, /^SELECT count\(\*\) FROM generate_series/);
    // A CPU-bound statement never sleeps: its execution time is on a CPU or waiting for one.
    expect((Number(cpu.on_cpu_ms) + Number(cpu.runq_wait_ms)) / Number(cpu.pgss_exec_ms)).toBeGreaterThan(0.8);
    const sleep = row(time, /^SELECT pg_sleep/);
    expect(Number(sleep.other_wait_ms) / Number(sleep.total_time_ms)).toBeGreaterThan(0.95);
    const update = row(time, /^UPDATE public\.demo_accounts/);
    expect(Number(update.lock_wait_ms) / Number(update.total_time_ms)).toBeGreaterThan(0.9);
    const point = row(time, /^SELECT balance FROM public\.demo_accounts WHERE id = \$1$/);
    expect(point.pgss_calls).toBe(point.calls); // calls: ours equal pg_stat_statements'
    expect(stdout).toMatch(/^client backend\s/m);

    // Statement latency: the sleeps' exact max next to pg_stat_statements' max_exec_time, and
    // their median in the log2 bucket of 250 ms: [2^17, 2^18) us.
    const sleepLatency = row(table('Statement latency'), /^SELECT pg_sleep/);
    expect(Number(sleepLatency.max_ms)).toBeGreaterThanOrEqual(Number(sleepLatency.pgss_max_ms) - 0.1);
    expect(Number(sleepLatency.max_ms)).toBeLessThan(Number(sleepLatency.pgss_max_ms) + 15);
    expect(Number(sleepLatency.p50_ms)).toBeGreaterThanOrEqual(131.072);
    expect(Number(sleepLatency.p50_ms)).toBeLessThanOrEqual(262.144);

    // Run-queue latency of the CPU-bound statement against the kernel's schedstat of its backend.
    const schedstat = printed(/schedstat over the workload: on CPU ([\d.]+) ms, run queue ([\d.]+) ms over (\d+) slices/);
    const runDelayMs = Number(schedstat[2]);
    const runq = row(table('Run-queue latency'), /^SELECT count\(\*\) FROM generate_series/);
    expect(Number(runq.waits)).toBeGreaterThan(0);
    expect(Number(runq.runq_wait_ms)).toBeLessThanOrEqual(1.05 * runDelayMs + 5);
    expect(Number(runq.runq_wait_ms)).toBeGreaterThanOrEqual(0.5 * runDelayMs - 5);

    // Block IO: the cold scan read about the whole relation, as pg_relation_size has it.
    const relationBytes = Number(printed(/^pg_relation_size\('demo_cold'\) = (\d+) bytes/)[1]);
    expect(relationBytes).toBeGreaterThan(32 * MB);
    const io = row(table('Block IO'), /^SELECT count\(\*\) FROM public\.demo_cold$/);
    expect(Number(io.read_mb) * MB).toBeGreaterThanOrEqual(0.8 * relationBytes);
    expect(Number(io.read_mb) * MB).toBeLessThan(1.1 * relationBytes + 2 * MB);
    expect(Number(io.avg_read_kb)).toBeGreaterThan(4);
    expect(Number(io.io_p50_ms)).toBeGreaterThan(0);

    // Memory: reclaim in the memory cgroup, against what the cgroup's own counters imply.
    const memory = section('Memory');
    if (MemoryCgroup.available()) {
      const expected = Number(printed(/hit the limit (\d+) times, cgroup grew [-\d.]+ MB: ~(\d+) pages to reclaim/)[2]);
      expect(Number(printed(/hit the limit (\d+) times/)[1])).toBeGreaterThan(0);
      const reclaim = row(parseTextTable(memory)!, /^SELECT sum\(length\(pad\)\) FROM public\.demo_cold$/);
      expect(Number(reclaim.reclaim_pages)).toBeGreaterThan(0.5 * expected);
      expect(Number(reclaim.reclaim_pages)).toBeLessThan(1.1 * expected + 512);
      expect(Number(reclaim.reclaim_ms)).toBeGreaterThan(0);
      expect(Number(reclaim.reclaim_ms)).toBeLessThan(Number(reclaim.total_time_ms));
    } else {
      expect(memory.join('\n')).toMatch(/memory cgroup step skipped: no cgroup v1 memory controller/);
    }

    // Heavyweight locks: the row-lock wait has the lock type and mode pg_locks showed.
    const [, locktype, mode] = printed(/^pg_locks showed the row-lock waiter waiting for: (\S+) (\S+)$/);
    const lock = row(table('Heavyweight lock waits'), /^UPDATE public\.demo_accounts/);
    expect(lock.locktype).toBe(locktype);
    expect(lock.mode).toBe(mode);
    expect(Number(lock.waits)).toBeGreaterThan(0);
    // Each wait lasts about as long as the holder keeps its transaction open (~300 ms).
    expect(Number(lock.mean_ms)).toBeGreaterThan(100);
    expect(Number(lock.mean_ms)).toBeLessThan(2000);

    // LWLocks: every tranche pg_stat_activity caught the inserts waiting on (3+ samples) has rows.
    const sampled = printed(/^pg_stat_activity samples during the insert burst \(\d+ inserts\): (.*)$/)[1]!;
    const lwlock = table('LWLock waits');
    const insertRows = lwlock.rows.filter((r) => /^INSERT INTO public\.demo_hot/.test(r.query!));
    expect(insertRows.length, 'LWLock waits of the insert burst').toBeGreaterThan(0);
    for (const item of sampled.split(', ')) {
      const [, tranche, n] = item.match(/^(\w+) x(\d+)$/) ?? []; // "Lock extend ExclusiveLock x2" is a heavyweight lock
      if (tranche && Number(n) >= 3)
        expect(
          insertRows.map((r) => r.tranche),
          `tranche ${tranche}`,
        ).toContain(tranche);
    }

    // The burst's relation extension waits are heavyweight locks: in the lock detail when caught often.
    if (Number(sampled.match(/Lock extend x(\d+)/)?.[1] ?? 0) >= 3) {
      const lockDetail = table('Heavyweight lock waits').rows;
      expect(
        lockDetail.some(
          (r) => /^INSERT INTO public\.demo_hot/.test(r.query!) && r.locktype === 'extend' && r.relation === 'public.demo_hot',
        ),
      ).toBe(true);
    }

    // LLC: figures where the PMU exists, else the reason and NULLs, never zeros.
    if (hasHardwarePmu) expect(table('LLC').rows.length).toBeGreaterThan(0);
    else
      expect(stdout).toMatch(
        /^LLC \(bpf_stats\.query_llc, llc set\): unsupported here: no hardware PMU.*; \d+ queries, 0 with llc figures/m,
      );

    // Health: one flush per second of the collector's life, nothing failed.
    const health = printed(
      /^Health \(bpf_stats\.health\): (\d+) flushes, (\d+) rows written, (\d+) dropped events, fullest map ([\d.]+)% full, (\d+) failed flushes$/,
    );
    expect(Number(health[1])).toBeGreaterThanOrEqual(5);
    expect(Number(health[1])).toBeLessThanOrEqual(wallS + 2);
    expect(Number(health[2])).toBeGreaterThan(0);
    expect(Number(health[5])).toBe(0);

    const clustersAfter = readdirSync(tmpdir()).filter((d) => d.startsWith('pg-bpf-stats-'));
    expect(clustersAfter.filter((d) => !clustersBefore.includes(d) && existsSync(join(tmpdir(), d)))).toEqual([]);
    expect(demoCgroups().filter((d) => !cgroupsBefore.includes(d))).toEqual([]);
  }, 180_000);
});
