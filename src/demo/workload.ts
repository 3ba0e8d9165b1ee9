import pg from 'pg';

/** A query the demo runs, and what it is meant to provoke. */
export interface WorkloadStep {
  label: string;
  run(connectionString: string, deadline: number): Promise<void>;
}

async function withClient<T>(connectionString: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString, application_name: 'pg-bpf-stats demo' });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Creates the tables the workload reads. */
export async function prepareWorkload(connectionString: string): Promise<void> {
  await withClient(connectionString, async (c) => {
    await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await c.query('DROP TABLE IF EXISTS demo_accounts');
    await c.query('CREATE TABLE demo_accounts (id int PRIMARY KEY, balance bigint NOT NULL)');
    await c.query('INSERT INTO demo_accounts SELECT g, g * 10 FROM generate_series(1, 100000) g');
    await c.query('ANALYZE demo_accounts');
    await c.query('SELECT pg_stat_statements_reset()');
  });
}

/**
 * The demo's workload: each step provokes one kind of time the collector splits out.
 * Steps run concurrently until the deadline.
 */
export const WORKLOAD: WorkloadStep[] = [
  {
    label: 'CPU-bound aggregate (on-CPU time)',
    run: (dsn, deadline) =>
      withClient(dsn, async (c) => {
        while (Date.now() < deadline) await c.query('SELECT count(*) FROM generate_series(1, 2000000) g WHERE g % 7 = 3');
      }),
  },
  {
    label: 'pg_sleep (off-CPU wait)',
    run: (dsn, deadline) =>
      withClient(dsn, async (c) => {
        while (Date.now() < deadline) await c.query('SELECT pg_sleep(0.25)');
      }),
  },
  {
    label: 'short point selects (many calls)',
    run: (dsn, deadline) =>
      withClient(dsn, async (c) => {
        let id = 1;
        while (Date.now() < deadline) {
          await c.query('SELECT balance FROM demo_accounts WHERE id = $1', [id]);
          id = (id * 7919) % 100000 + 1;
        }
      }),
  },
  {
    label: 'row lock held by another session (lock wait)',
    run: (dsn, deadline) =>
      withClient(dsn, (holder) =>
        withClient(dsn, async (waiter) => {
          while (Date.now() + 600 < deadline) {
            await holder.query('BEGIN');
            await holder.query('SELECT balance FROM demo_accounts WHERE id = 1 FOR UPDATE');
            const waiting = waiter.query('UPDATE demo_accounts SET balance = balance + 1 WHERE id = 1');
            await new Promise((resolve) => setTimeout(resolve, 300));
            await holder.query('COMMIT');
            await waiting;
          }
        }),
      ),
  },
];
