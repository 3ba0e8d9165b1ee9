import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { binaryArray, type ArrayElement, type ArrayElementType } from '../../src/storage/binary-array.js';

/*
 * The flush's array parameters go in Postgres's binary format: the server, not this test, says
 * what each array holds (its text output), so an encoding both sides of a round trip got wrong
 * in the same way cannot pass.
 */
let cluster: ThrowawayCluster;
let client: pg.Client;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  client = new pg.Client(cluster.connectionString());
  await client.connect();
});

afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

/** The server's text of `values` sent as a binary `type[]` parameter. */
async function asServerSees(type: ArrayElementType, values: readonly ArrayElement[]): Promise<string> {
  const { rows } = await client.query<{ text: string }>(`SELECT $1::${type}[]::text AS text`, [binaryArray(type, values)]);
  return rows[0].text;
}

describe('binaryArray', () => {
  it('sends each element type as the server reads it, NULLs included', async () => {
    expect(await asServerSees('float8', [1, 2.5, null, 1e-7, 123456789.125, -0.5])).toBe('{1,2.5,NULL,1e-07,123456789.125,-0.5}');
    expect(await asServerSees('int8', [0n, -3n, 9223372036854775807n, -9223372036854775808n, null, '-7046406386565496587', 4294967296, -4294967297, 2 ** 53 - 1])).toBe(
      '{0,-3,9223372036854775807,-9223372036854775808,NULL,-7046406386565496587,4294967296,-4294967297,9007199254740991}',
    );
    expect(await asServerSees('oid', [0, 10, 4294967295, null])).toBe('{0,10,4294967295,NULL}');
    expect(await asServerSees('int4', [1, -1, 2147483647, null])).toBe('{1,-1,2147483647,NULL}');
    expect(await asServerSees('bool', [true, false, null])).toBe('{t,f,NULL}');
  });

  it('sends an empty array, which unnest turns into no rows', async () => {
    expect(await asServerSees('int8', [])).toBe('{}');
    const { rows } = await client.query('SELECT * FROM unnest($1::float8[], $2::oid[])', [binaryArray('float8', []), binaryArray('oid', [])]);
    expect(rows).toEqual([]);
  });

  it('refuses what int8 cannot hold instead of wrapping it around', () => {
    expect(() => binaryArray('int8', [2n ** 63n])).toThrow(RangeError);
    expect(() => binaryArray('int8', [-(2n ** 63n) - 1n])).toThrow(RangeError);
    expect(() => binaryArray('int8', [1.5])).toThrow(RangeError);
  });

  it('is refused by the server as another element type, never misread', async () => {
    await expect(client.query('SELECT $1::int8[]', [binaryArray('float8', [1])])).rejects.toThrow(/element type/);
  });
});
