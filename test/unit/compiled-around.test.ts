import { Kysely, sql, type RawBuilder } from 'kysely';
import { describe, expect, it } from 'vitest';
import { compiledAround } from '../../src/flush/compiled-around.js';
import { compileOnlyDialect } from '../support/compile-only-dialect.js';

interface Db {
  t: { a: number; b: string; n: number };
}

const db = new Kysely<Db>({ dialect: compileOnlyDialect() });

const upsert = (rows: RawBuilder<unknown>) =>
  db
    .insertInto('t')
    .columns(['a', 'b'])
    .expression(sql`SELECT u.a, u.b FROM ${rows} AS u(a, b)`)
    .onConflict((oc) => oc.column('a').doUpdateSet({ n: sql`t.n + 1` }));

const rowsOf = (a: number[], b: string[]) => sql`unnest(${a}::int4[], ${b}::text[])`;

describe('compiledAround', () => {
  it('gives the statement the builder gives, text and parameters, whatever the rows', () => {
    const around = compiledAround(upsert);
    for (const [a, b] of [
      [
        [1, 2],
        ['x', 'y'],
      ],
      [[3], ['z']],
    ] as const) {
      const direct = sql`WITH w AS (${upsert(rowsOf([...a], [...b]))}) SELECT 1`.compile(db);
      const reused = sql`WITH w AS (${around(rowsOf([...a], [...b]))}) SELECT 1`.compile(db);
      expect(reused.sql).toBe(direct.sql);
      expect(reused.parameters).toEqual([a, b]);
      expect(reused.parameters).toEqual(direct.parameters);
    }
  });

  it('refuses a statement with parameters of its own, or without the hole', () => {
    const withParameter = (rows: RawBuilder<unknown>) =>
      db.insertInto('t').columns(['a']).expression(sql`SELECT u.a FROM ${rows} AS u(a) WHERE u.a > ${1}`);
    expect(() => compiledAround(withParameter)).toThrow(/one hole and no parameters, not 1 and 1/);
    expect(() => compiledAround(() => db.deleteFrom('t'))).toThrow(/one hole and no parameters, not 0 and 0/);
  });
});
