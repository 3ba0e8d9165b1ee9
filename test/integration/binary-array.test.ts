import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { METRIC_COLUMN_NAMES } from '../../src/storage/metric-arrays.js';
import { binaryArray, binaryRecordArray, type ArrayElement, type ArrayElementType } from '../../src/storage/binary-array.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';
import { QUERY_INCREMENTS_FIELDS, QUERY_INCREMENTS_TYPE, QueryIncrements } from '../../src/storage/query-increments.js';

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
  await migrateSchema(client, undefined, 'test');
});

afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

/** The server's text of `values` sent as a binary `type[]` parameter. */
async function asServerSees(type: ArrayElementType, values: readonly ArrayElement[]): Promise<string> {
  const { rows } = await client.query<{ text: string }>(`SELECT $1::${type}[]::text AS text`, [binaryArray(type, values)]);
  return rows[0]!.text;
}

describe('binaryArray', () => {
  it('sends each element type as the server reads it, NULLs included', async () => {
    expect(await asServerSees('float8', [1, 2.5, null, 1e-7, 123456789.125, -0.5])).toBe('{1,2.5,NULL,1e-07,123456789.125,-0.5}');
    expect(
      await asServerSees('int8', [
        0n,
        -3n,
        9223372036854775807n,
        -9223372036854775808n,
        null,
        '-7046406386565496587',
        4294967296,
        -4294967297,
        2 ** 53 - 1,
      ]),
    ).toBe('{0,-3,9223372036854775807,-9223372036854775808,NULL,-7046406386565496587,4294967296,-4294967297,9007199254740991}');
    expect(await asServerSees('oid', [0, 10, 4294967295, null])).toBe('{0,10,4294967295,NULL}');
    expect(await asServerSees('int4', [1, -1, 2147483647, null])).toBe('{1,-1,2147483647,NULL}');
    expect(await asServerSees('bool', [true, false, null])).toBe('{t,f,NULL}');
  });

  it('sends an empty array, which unnest turns into no rows', async () => {
    expect(await asServerSees('int8', [])).toBe('{}');
    const { rows } = await client.query('SELECT * FROM unnest($1::float8[], $2::oid[])', [
      binaryArray('float8', []),
      binaryArray('oid', []),
    ]);
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

describe('binaryRecordArray', () => {
  it('sends rows of a composite type, NULL columns included, as the server reads them', async () => {
    await client.query('CREATE TYPE pair AS (n int8, x float8, b bool)');
    const { rows } = await client.query<{ oid: string }>(`SELECT 'pair'::regtype::oid::int8::text AS oid`);
    const records = binaryRecordArray(
      Number(rows[0]!.oid),
      ['int8', 'float8', 'bool'],
      [
        [-5n, 2.5, true],
        [null, 1e-7, null],
        [9223372036854775807n, null, false],
      ],
    );
    const { rows: got } = await client.query<{ text: string }>('SELECT $1::pair[]::text AS text', [records]);
    expect(got[0]!.text).toBe('{"(-5,2.5,t)","(,1e-07,)","(9223372036854775807,,f)"}');
    // The server checks each column's type: rows of another shape are refused.
    const wrong = binaryRecordArray(Number(rows[0]!.oid), ['int8', 'int8', 'bool'], [[1n, 2n, true]]);
    await expect(client.query('SELECT $1::pair[]', [wrong])).rejects.toThrow(/type/);
  });
});

describe('bpf_stats.query_increments', () => {
  it('has the key and then the metric columns, in METRIC_COLUMNS order, of the types the flush sends', async () => {
    const { rows } = await client.query<{ attname: string; typname: string }>(
      `SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = (SELECT typrelid FROM pg_type WHERE oid = $1::regtype) AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum`,
      [QUERY_INCREMENTS_TYPE],
    );
    expect(rows.map((r) => r.attname)).toEqual(['userid', 'dbid', 'toplevel', 'queryid', ...METRIC_COLUMN_NAMES]);
    expect(rows.map((r) => r.typname)).toEqual([...QUERY_INCREMENTS_FIELDS]);
  });

  it('carries query rows to the server unchanged, NULL (not measured) columns included', async () => {
    const db = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: cluster.connectionString(), max: 1 }) }),
    });
    try {
      const increments = await QueryIncrements.resolve(db);
      const values = METRIC_COLUMN_NAMES.map((_, i) => (i % 3 === 0 ? null : i % 3 === 1 ? i + 0.25 : BigInt(i) * 1_000_000_007n));
      // Metric types by column: what the row type says each one is.
      const typed = values.map((v, i) =>
        v === null ? null : QUERY_INCREMENTS_FIELDS[i + 4] === 'float8' ? Number(v) : BigInt(Math.trunc(Number(v))),
      );
      const row = { userid: 10, dbid: 4294967295, toplevel: false, queryid: '-7046406386565496587', values: typed };
      const { rows } = await sql<
        Record<string, unknown>
      >`SELECT u.*, u.queryid::text AS queryid_text FROM ${increments.unnest([row, { ...row, userid: 11, toplevel: true }])} AS u`.execute(
        db,
      );
      expect(rows).toHaveLength(2);
      expect(rows[0]).toMatchObject({ userid: 10, dbid: 4294967295, toplevel: false, queryid_text: '-7046406386565496587' });
      expect(rows[1]).toMatchObject({ userid: 11, toplevel: true });
      METRIC_COLUMN_NAMES.forEach((column, i) => {
        const sent = typed[i];
        const got = rows[0]![column];
        // int8 comes back as a string from node-postgres, float8 as a number.
        expect(sent === null ? got : typeof sent === 'bigint' ? BigInt(got as string) : got, column).toEqual(sent === null ? null : sent);
      });
    } finally {
      await db.destroy();
    }
  });
});
