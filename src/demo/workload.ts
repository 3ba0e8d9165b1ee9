import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { coldScanStep } from './cold-scan-step.js';
import { lwlockBurstStep } from './lwlock-burst-step.js';
import { backendPid } from '../storage/backend-pid.js';
import { withClient } from './with-client.js';
import type { ColdTable, WorkloadStep } from './workload-context.js';

/** Rows of demo_cold: about 64 MB, four times the demo cluster's shared_buffers. */
const COLD_ROWS = 270_000;

/**
 * Creates the tables the workload reads. demo_cold is frozen and checkpointed, so a scan of
 * it only reads (no hint bits to set, no dirty pages to write back).
 */
export async function prepareWorkload(connectionString: string, dataDir: string): Promise<ColdTable> {
  return withClient(connectionString, async (c) => {
    await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public');
    await c.query('DROP TABLE IF EXISTS public.demo_accounts, public.demo_cold, public.demo_hot');
    await c.query('CREATE TABLE public.demo_accounts (id int PRIMARY KEY, balance bigint NOT NULL)');
    await c.query('INSERT INTO public.demo_accounts SELECT g, g * 10 FROM generate_series(1, 100000) g');
    await c.query('ANALYZE public.demo_accounts');
    await c.query(`CREATE TABLE public.demo_cold AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, ${COLD_ROWS}) g`);
    await c.query('VACUUM (FREEZE, ANALYZE) public.demo_cold');
    await c.query('CREATE TABLE public.demo_hot (id int, pad text)');
    await c.query('CHECKPOINT');
    const { rows } = await c.query(
      "SELECT pg_relation_size('public.demo_cold') AS bytes, pg_relation_filepath('public.demo_cold') AS path",
    );
    await c.query('SELECT public.pg_stat_statements_reset()');
    return { name: 'demo_cold', bytes: Number(rows[0].bytes), path: join(dataDir, rows[0].path) };
  });
}

/** /proc/<pid>/schedstat: ns on a CPU, ns waiting in a run queue, slices run. */
function schedstat(pid: number): [number, number, number] {
  const [run, delay, slices] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
  return [run ?? 0, delay ?? 0, slices ?? 0];
}

/**
 * The demo's workload: each step provokes one kind of time or event the collector splits out.
 * Steps run concurrently; the continuous ones until the deadline, the bounded ones (cold scan,
 * insert burst) once.
 */
export const WORKLOAD: WorkloadStep[] = [
  {
    label: 'CPU-bound aggregate (on-CPU time; competing with the others gives run-queue waits)',
    run: ({ dsn, deadline, facts }) =>
      withClient(dsn, async (c) => {
        const pid = backendPid(c);
        const before = schedstat(pid);
        while (Date.now() < deadline) await c.query('SELECT count(*) FROM generate_series(1, 2000000) g WHERE g % 7 = 3');
        const after = schedstat(pid);
        facts.cpu = { pid, onCpuMs: (after[0] - before[0]) / 1e6, runDelayMs: (after[1] - before[1]) / 1e6, slices: after[2] - before[2] };
      }),
  },
  {
    label: 'pg_sleep(0.25) (off-CPU wait of a known length)',
    run: ({ dsn, deadline }) =>
      withClient(dsn, async (c) => {
        while (Date.now() < deadline) await c.query('SELECT pg_sleep(0.25)');
      }),
  },
  {
    label: 'short point selects (many calls)',
    run: ({ dsn, deadline }) =>
      withClient(dsn, async (c) => {
        let id = 1;
        while (Date.now() < deadline) {
          await c.query('SELECT balance FROM public.demo_accounts WHERE id = $1', [id]);
          id = ((id * 7919) % 100000) + 1;
        }
      }),
  },
  {
    label: 'row lock held 300 ms by another session (heavyweight lock wait)',
    run: ({ dsn, deadline, facts }) =>
      withClient(dsn, (holder) =>
        withClient(dsn, async (waiter) => {
          const waiterPid = backendPid(waiter);
          while (Date.now() + 600 < deadline) {
            await holder.query('BEGIN');
            await holder.query('SELECT balance FROM public.demo_accounts WHERE id = 1 FOR UPDATE');
            const waiting = waiter.query('UPDATE public.demo_accounts SET balance = balance + 1 WHERE id = 1');
            waiting.catch(() => undefined); // awaited below; not unhandled if the holder fails first
            await new Promise((resolve) => setTimeout(resolve, 150));
            // Ground truth for query_lock_detail: what pg_locks says the waiter waits for.
            if (!facts.rowLock) {
              const { rows } = await holder.query('SELECT locktype, mode FROM pg_locks WHERE pid = $1 AND NOT granted', [waiterPid]);
              if (rows[0]) facts.rowLock = { locktype: rows[0].locktype, mode: rows[0].mode };
            }
            await new Promise((resolve) => setTimeout(resolve, 150));
            await holder.query('COMMIT');
            await waiting;
          }
        }),
      ),
  },
  coldScanStep,
  lwlockBurstStep,
];
