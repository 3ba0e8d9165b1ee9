import pg from 'pg';

/**
 * Runs `fn` on a new connection, with its backend's pid, and closes the connection after, so
 * the backend exits as a client's would.
 *
 * @example
 * await withSession(cluster.connectionString(), (c, pid) => c.query('SELECT pg_sleep(0.1)'));
 */
export async function withSession<T>(connectionString: string, fn: (client: pg.Client, pid: number) => Promise<T>): Promise<T> {
  const client = new pg.Client(connectionString);
  await client.connect();
  try {
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    return await fn(client, pid);
  } finally {
    await client.end();
  }
}
