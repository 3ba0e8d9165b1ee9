import pg from 'pg';

/** A statement of its own query id: `SELECT 1<op>1<op>...` with `n` terms (pg_stat_statements: `SELECT $1<op>$2...`). */
export const statementOfTerms = (n: number, op = '+') => `SELECT 1${`${op}1`.repeat(n)}`;

/** Runs `sqls` in order, `times` over, on one new connection, and closes it. */
export async function runStatements(connectionString: string, sqls: readonly string[], times = 1): Promise<void> {
  const client = new pg.Client(connectionString);
  await client.connect();
  try {
    for (let i = 0; i < times; i++) for (const sql of sqls) await client.query(sql);
  } finally {
    await client.end();
  }
}
