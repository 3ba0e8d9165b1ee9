import type pg from 'pg';
import { connect } from '../storage/connect.js';

/**
 * Runs `fn` with a fresh connection of the demo (application_name 'pg-bpf-stats demo'), closed
 * afterwards whatever happens.
 *
 * @example
 * await withClient(dsn, (c) => c.query('SELECT 1'));
 */
export async function withClient<T>(connectionString: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  // connect() listens for socket errors: a server going away (Ctrl-C) fails the query, not the process.
  const client = await connect(connectionString, 'pg-bpf-stats demo');
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
