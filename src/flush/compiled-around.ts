import { sql, type Compilable, type RawBuilder } from 'kysely';

/** Stands where the rows go while the statement is compiled; no SQL kysely writes contains it. */
const HOLE = '__pg_bpf_stats_rows__';

/**
 * A statement that kysely's builder makes and compiles once, around a hole where each flush puts
 * its rows (an `unnest(...)` of its parameters). The text around the rows never changes, and
 * building and compiling an upsert of ~30 columns again at every flush cost ~0.5 ms, a tenth of
 * a flush that writes 100 rows.
 *
 * The statement must have no parameters of its own: its values are all in the rows.
 *
 * @example
 * const upsert = compiledAround((rows) => db.insertInto('t').columns(['a']).expression(sql`SELECT u.a FROM ${rows} AS u(a)`));
 * const statement = upsert(sql`unnest(${values}::int4[])`); // a RawBuilder, for a flush's CTE
 */
export function compiledAround(build: (rows: RawBuilder<unknown>) => Compilable): (rows: RawBuilder<unknown>) => RawBuilder<unknown> {
  const { sql: text, parameters } = build(sql.raw(HOLE)).compile();
  const pieces = text.split(HOLE);
  if (pieces.length !== 2 || parameters.length) {
    throw new Error(`compiledAround: a statement needs one hole and no parameters, not ${pieces.length - 1} and ${parameters.length}`);
  }
  const before = sql.raw(pieces[0]!);
  const after = sql.raw(pieces[1]!);
  return (rows) => sql`${before}${rows}${after}`;
}
