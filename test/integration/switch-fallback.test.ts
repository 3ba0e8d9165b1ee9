import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { cpuTimeMs } from '../support/cpu-time.js';
import { statsFor as sharedStatsFor } from '../support/stats-for.js';
import { withSession } from '../support/session.js';

/*
 * The switch-out for kernels whose sched_switch passes three arguments (before 5.18:
 * on_switch_3args, bpf/cpu.bpf.h), run on this kernel, where it loads and attaches as well (it
 * does not read the fourth argument): the sidecar is told to use it (a test-only option; the
 * loader would pick on_sched_switch here). Its figures are checked against the same ground
 * truth as the default program's in collector.test.ts and wait-events.test.ts: the kernel's
 * own CPU time of the backend (/proc/<pid>/schedstat), a known sleep, the wait event
 * pg_stat_activity shows. With the sched set, whose run-queue histograms work inside it.
 */
const run = promisify(execFile);
let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;

const session = <T>(fn: (client: pg.Client, pid: number) => Promise<T>) => withSession(cluster.connectionString(), fn);

/** The collector programs attached to sched_switch now, by name (bpftool): ours, and any other collector's. */
async function attachedSwitchPrograms(): Promise<string[]> {
  const progs = JSON.parse((await run('bpftool', ['-j', 'prog', 'show'])).stdout) as Array<{ id: number; name?: string }>;
  const links = JSON.parse((await run('bpftool', ['-j', 'link', 'show'])).stdout) as Array<{ prog_id: number }>;
  const linked = new Set(links.map((l) => l.prog_id));
  return progs.filter((p) => linked.has(p.id) && (p.name === 'on_switch_3args' || p.name === 'on_sched_switch')).map((p) => p.name!);
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    probeSets: ['sched'],
    switchProgram: 'on_switch_3args',
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('the switch-out for three-argument sched_switch (pre-5.18), forced on this kernel', () => {
  it('is the program attached, for the cpu set and the sched switch inside it', async () => {
    expect(await attachedSwitchPrograms()).toContain('on_switch_3args');
    expect(sidecar.attached()).toEqual(expect.arrayContaining(['cpu', 'sched']));
  });

  it("gives a CPU-bound statement on-CPU time within 15% of the kernel's count for its backend", async () => {
    const kernelCpuMs = await session(async (c, pid) => {
      const before = cpuTimeMs(pid);
      await c.query('SELECT count(*) FROM generate_series(1, 4000000) g WHERE g % 7 = 0');
      return cpuTimeMs(pid) - before;
    });
    const row = await sharedStatsFor(admin, sidecar, '%generate_series($1, $2) g WHERE g % $3 = $4');
    expect(kernelCpuMs).toBeGreaterThan(150);
    expect(row.on_cpu_ms / kernelCpuMs).toBeGreaterThan(0.85);
    expect(row.on_cpu_ms / kernelCpuMs).toBeLessThan(1.15);
    // It never slept: its time is on a CPU or waiting for one.
    expect((row.on_cpu_ms + row.runq_wait_ms) / row.total_time_ms).toBeGreaterThan(0.9);
  });

  it('puts a pg_sleep off CPU as a sleep (the state read from the task), charged to Timeout:PgSleep within 5%', async () => {
    const elapsed = await session(async (c) => {
      const started = performance.now();
      await c.query('SELECT pg_sleep(0.8)');
      return performance.now() - started;
    });
    const row = await sharedStatsFor(admin, sidecar, 'SELECT pg_sleep($1)');
    expect(row.total_time_ms).toBeGreaterThan(790);
    expect(row.total_time_ms).toBeLessThan(900);
    expect(row.other_wait_ms / row.total_time_ms).toBeGreaterThan(0.95);
    expect(row.on_cpu_ms).toBeLessThan(40);
    const { rows } = await admin.query(
      `SELECT e.wait_time_ms, e.waits::int AS waits
         FROM bpf_stats.query_wait_events e JOIN pg_stat_statements s USING (queryid)
        WHERE s.query = 'SELECT pg_sleep($1)' AND e.wait_event_type = 'Timeout' AND e.wait_event = 'PgSleep'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0].wait_time_ms / 800).toBeGreaterThan(0.95);
    expect(rows[0].wait_time_ms / 800).toBeLessThan(1.05);
    expect(rows[0].wait_time_ms).toBeLessThan(elapsed);
    expect(rows[0].waits).toBeGreaterThanOrEqual(1);
  });
});
