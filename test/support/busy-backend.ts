import pg from 'pg';

/**
 * A backend busy with a CPU-bound statement (a count over 25 M rows, seconds here), running once
 * this resolves. A backend notices its postmaster's death only when it waits, so killed now, the
 * postmaster leaves this one running for the rest of the statement: in the data directory,
 * running the binary, with no parent there. `done`: the statement is over, the client closed.
 */
export async function busyBackend(connectionString: string): Promise<{ pid: number; done: Promise<void> }> {
  const client = new pg.Client(connectionString);
  client.on('error', () => undefined);
  await client.connect();
  const pid: number = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  const done = client
    .query('SELECT count(*) FROM generate_series(1, 25000000)')
    .then(
      () => undefined,
      () => undefined,
    )
    .finally(() => client.end().catch(() => undefined));
  await new Promise((r) => setTimeout(r, 300));
  return { pid, done };
}
