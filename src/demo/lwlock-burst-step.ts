import type pg from 'pg';
import { connect } from '../storage/connect.js';
import { withClient } from './with-client.js';
import type { WorkloadStep } from './workload-context.js';

const SESSIONS = 8;
const BURST_MS = 2000;
/** Starts a little after the others, so it meets a machine that is already busy. */
const START_DELAY_MS = 1000;
/** pg_stat_activity sampling period: a witness, not a load of its own. */
const SAMPLE_EVERY_MS = 5;
export const LWLOCK_QUERY = "INSERT INTO public.demo_hot SELECT g, repeat('x', 100) FROM generate_series(1, 20) g";

/**
 * A short burst of small inserts into one table from several sessions: they queue for the WAL
 * insertion and write locks, the table's last page and its extension lock (LWLock and
 * heavyweight waits). pg_stat_activity is sampled meanwhile, as an independent witness of
 * which waits happened.
 */
export const lwlockBurstStep: WorkloadStep = {
  label: `${SESSIONS} sessions inserting into demo_hot for ${BURST_MS / 1000} s (LWLock waits: WAL, buffer content, extension)`,
  run: async ({ dsn, facts, print }) => {
    await new Promise((resolve) => setTimeout(resolve, START_DELAY_MS));
    const clients: pg.Client[] = [];
    const sampled: Record<string, number> = {};
    let statements = 0;
    try {
      for (let i = 0; i < SESSIONS; i++) clients.push(await connect(dsn, 'pg-bpf-stats demo'));
      const started = performance.now();
      const until = started + BURST_MS;
      await withClient(dsn, async (observer) => {
        const sampler = (async () => {
          while (performance.now() < until) {
            // Not pg_locks: reading it takes every lock manager partition, waits of its own.
            const { rows } = await observer.query(
              `SELECT wait_event_type, wait_event FROM pg_stat_activity
                WHERE query LIKE 'INSERT INTO public.demo_hot%' AND state = 'active' AND wait_event_type IN ('LWLock', 'Lock')`,
            );
            for (const r of rows) {
              // A Lock wait event is the lock type (e.g. 'extend'), an LWLock one the tranche.
              const name = r.wait_event_type === 'LWLock' ? r.wait_event : `Lock ${r.wait_event}`;
              sampled[name] = (sampled[name] ?? 0) + 1;
            }
            await new Promise((resolve) => setTimeout(resolve, SAMPLE_EVERY_MS));
          }
        })();
        sampler.catch(() => undefined); // awaited below; not unhandled if an insert fails first
        await Promise.all(
          clients.map(async (c) => {
            while (performance.now() < until) {
              await c.query(LWLOCK_QUERY);
              statements++;
            }
          }),
        );
        await sampler;
      });
      const ms = performance.now() - started;
      facts.lwlock = { query: LWLOCK_QUERY, sessions: SESSIONS, ms, statements, sampled };
      const seen = Object.entries(sampled)
        .sort((a, b) => b[1] - a[1])
        .map(([name, n]) => `${name} x${n}`)
        .join(', ');
      print(
        `lwlock: ${SESSIONS} sessions ran ${statements} inserts in ${(ms / 1000).toFixed(1)} s; ` +
          `pg_stat_activity samples caught waits: ${seen || 'none'}`,
      );
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    }
  },
};
