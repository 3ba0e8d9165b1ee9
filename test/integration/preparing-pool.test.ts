import type { PostgresPoolClient } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { preparingPool } from '../../src/storage/preparing-pool.js';

/*
 * The writer's pool (preparingPool): a text sent again and again runs as a named prepared
 * statement, and a server that lost it (what a pooler in transaction mode does) costs one
 * retry, unnamed, never a failed or doubled statement.
 */
let cluster: ThrowawayCluster;
let pool: pg.Pool;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  pool = new pg.Pool({ connectionString: cluster.connectionString(), max: 1, idleTimeoutMillis: 0 });
  await pool.query('CREATE TABLE counted (n int)');
});

afterAll(async () => {
  await pool?.end();
  await cluster?.stop();
});

/** The named statements of `client`'s session (pg_prepared_statements shows the asking session's). */
async function prepared(client: PostgresPoolClient): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name', []);
  return rows.map((r) => r.name);
}

describe('preparingPool', () => {
  it('names a statement from its third run on, and keeps a one-off unnamed', async () => {
    const wrapped = preparingPool(pool);
    const client = await wrapped.connect();
    try {
      const insert = 'INSERT INTO counted SELECT unnest($1::int[])';
      await client.query(insert, ['{1,2}']);
      await client.query(insert, ['{3}']);
      expect(await prepared(client)).toEqual([]);
      await client.query(insert, ['{4}']);
      await client.query(insert, ['{5,6}']);
      await client.query('SELECT 1', []);
      const names = await prepared(client);
      expect(names).toHaveLength(1);
      expect(names[0]).toMatch(/^pgbpf_[0-9a-f]{24}$/);
      const { rows } = await client.query<{ sum: number }>('SELECT sum(n)::int AS sum FROM counted', []);
      expect(rows[0]!.sum).toBe(21);
    } finally {
      client.release();
    }
  });

  it('runs a statement the server lost once, unnamed, and names nothing after that', async () => {
    const wrapped = preparingPool(pool);
    const client = await wrapped.connect();
    try {
      // The pool's one connection is the first test's: what it named is still there.
      await client.query('DEALLOCATE ALL', []);
      await client.query('TRUNCATE counted', []);
      const insert = 'INSERT INTO counted VALUES ($1)';
      for (let n = 1; n <= 3; n++) await client.query(insert, [n]);
      expect(await prepared(client)).toHaveLength(1);
      // The driver still thinks it is there; the server answers 26000 to its Bind.
      await client.query('DEALLOCATE ALL', []);
      await client.query(insert, [4]);
      await client.query(insert, [5]);
      expect(await prepared(client)).toEqual([]);
      const { rows } = await client.query<{ n: number }>('SELECT array_agg(n ORDER BY n) AS n FROM counted', []);
      expect(rows[0]!.n).toEqual([1, 2, 3, 4, 5]);
    } finally {
      client.release();
    }
  });
});
