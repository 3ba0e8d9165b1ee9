import type pg from 'pg';

/** Distinct statement shapes available: 2^14. */
export const SHAPE_BITS = 14;

/**
 * Statement k (0 <= k < 2^14): 14 constants whose types spell k in binary. Constants are
 * normalized by pg_stat_statements, their types are not: each k has its own query id.
 */
export function distinctStatement(k: number): string {
  const items = Array.from({ length: SHAPE_BITS }, (_, bit) => ((k >> bit) & 1 ? `'t'` : '1'));
  return `SELECT ${items.join(', ')}`;
}

/**
 * Runs `count` statements, k = (offset + i) mod `distinct`, one per round trip: a backend
 * publishes one query id per message, so several statements in one simple-protocol message
 * would be attributed to one of them.
 */
export async function runDistinctStatements(client: pg.Client, count: number, distinct: number, offset = 0): Promise<void> {
  for (let i = 0; i < count; i++) await client.query(distinctStatement((offset + i) % distinct));
}
