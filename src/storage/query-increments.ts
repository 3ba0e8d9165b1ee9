import { sql, type Kysely, type RawBuilder } from 'kysely';
import { binaryRecordArray, type ArrayElement, type ArrayElementType } from './binary-array.js';
import { METRIC_COLUMN_TYPES } from './metric-arrays.js';
import type { QueryRow } from './metric-row.js';

/** The row type a flush sends query rows as: created by migrations/1764200000000_query-increments.sql, kept to the metric column list by metric-schema.ts. */
export const QUERY_INCREMENTS_TYPE = 'bpf_stats.query_increments';

/** Its columns' types, in order: the key, then the metric columns in METRIC_COLUMNS order. */
export const QUERY_INCREMENTS_FIELDS: readonly ArrayElementType[] = ['oid', 'oid', 'bool', 'int8', ...METRIC_COLUMN_TYPES];

/**
 * Query rows as one binary array of bpf_stats.query_increments, the form in which query_stats
 * and its history receive them: `FROM ${increments.unnest(rows)} AS u` gives u.userid, u.dbid,
 * u.toplevel, u.queryid and the metric columns. The array names its element type by oid, which
 * is the writer's database's own: resolve() reads it once, after the migrations.
 *
 * @example
 * const increments = await QueryIncrements.resolve(db);
 * sql`INSERT INTO t SELECT u.* FROM ${increments.unnest(rows)} AS u`;
 */
export class QueryIncrements {
  /**
   * The last rows encoded: history, written in the same flush as the rows it sums, often sends
   * the very same ones. Kept until the flush's synchronous part is over (FlushWriter prepares and
   * builds every part before its first await), not until the next flush: with thousands of rows
   * the encoded array is megabytes.
   */
  private last: { rows: readonly QueryRow[]; encoded: Buffer } | null = null;

  private constructor(private readonly typeOid: number) {}

  static async resolve<DB>(db: Kysely<DB>): Promise<QueryIncrements> {
    const { rows } = await sql<{ oid: string }>`SELECT ${sql.lit(QUERY_INCREMENTS_TYPE)}::regtype::oid::int8::text AS oid`.execute(db);
    return new QueryIncrements(Number(rows[0]!.oid));
  }

  /** `unnest(<the rows>)`, one binary parameter whatever their number. */
  unnest(rows: readonly QueryRow[]): RawBuilder<unknown> {
    return sql`unnest(${this.encode(rows)}::${sql.raw(`${QUERY_INCREMENTS_TYPE}[]`)})`;
  }

  private encode(rows: readonly QueryRow[]): Buffer {
    // Rows are never changed once made: the same objects in the same order encode the same.
    if (this.last && sameRows(this.last.rows, rows)) return this.last.encoded;
    const encoded = binaryRecordArray(this.typeOid, QUERY_INCREMENTS_FIELDS, rows, columnOf);
    if (!this.last) queueMicrotask(() => (this.last = null));
    this.last = { rows, encoded };
    return encoded;
  }
}

/** A row's value in QUERY_INCREMENTS_FIELDS order: the key, then its metric columns. */
function columnOf(row: QueryRow, column: number): ArrayElement {
  switch (column) {
    case 0:
      return row.userid;
    case 1:
      return row.dbid;
    case 2:
      return row.toplevel;
    case 3:
      return row.queryid;
    default:
      return row.values[column - 4];
  }
}

function sameRows(a: readonly QueryRow[], b: readonly QueryRow[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
