import pg from 'pg';

/*
 * An application's distinct statements as an ORM makes them: one login role, an IN-list of
 * every length (each length its own query id before PostgreSQL 18) times a select list of 1 to
 * 20 columns. Used by bench/distinct-burst.ts and test/integration/distinct-burst.test.ts.
 */

/** Columns of the burst's table beside its id. */
export const BURST_COLUMNS = 20;

/** Creates the table the statements read (as a superuser) and lets `role` read it. */
export async function createBurstTable(admin: pg.Client, role: string): Promise<void> {
  const columns = Array.from({ length: BURST_COLUMNS }, (_, i) => `g AS c${i + 1}`).join(', ');
  await admin.query(`DROP TABLE IF EXISTS burst`);
  await admin.query(`CREATE TABLE burst AS SELECT g AS id, ${columns} FROM generate_series(1, 1000) g`);
  // An index: the IN-list is a lookup, not a scan comparing every row with every element, so the
  // statements come as fast as an application's would.
  await admin.query(`ALTER TABLE burst ADD PRIMARY KEY (id)`);
  await admin.query(`ANALYZE burst`);
  await admin.query(`GRANT SELECT ON burst TO ${role}`);
}

/**
 * Statement k of `count`: the select list has 1 + k % columns columns, the IN-list
 * 1 + floor(k / columns) elements, so `count` statements have `count` query ids when count is at
 * most columns × 1000.
 */
export function burstStatement(k: number, columns = BURST_COLUMNS): string {
  const select = Array.from({ length: 1 + (k % columns) }, (_, i) => `c${i + 1}`).join(', ');
  const inList = Array.from({ length: 1 + Math.floor(k / columns) }, (_, i) => String(i + 1)).join(',');
  return `SELECT ${select} FROM burst WHERE id IN (${inList})`;
}

/**
 * Runs statements 0..count-1 once each over `sessions` connections of `dsn`, as fast as they
 * go: statement k on session k % sessions, so every session runs its share back to back.
 * Returns the wall time in ms.
 */
export async function runBurst(dsn: string, count: number, sessions: number, columns = BURST_COLUMNS): Promise<number> {
  const clients = await Promise.all(
    Array.from({ length: sessions }, async () => {
      const client = new pg.Client(dsn);
      await client.connect();
      return client;
    }),
  );
  try {
    const started = performance.now();
    await Promise.all(
      clients.map(async (client, s) => {
        for (let k = s; k < count; k += sessions) await client.query(burstStatement(k, columns));
      }),
    );
    return performance.now() - started;
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

export interface BurstComparison {
  /** Keys pg_stat_statements holds for the role (top level). */
  pgss: number;
  /** Of those, the keys query_stats has with the same calls. */
  exact: number;
  /** Keys query_stats lacks. */
  missing: number;
  /** Keys it has with other calls. */
  wrongCalls: number;
  /** A few of the keys not exact, for a message. */
  examples: Array<{ queryid: string; pgss: number; ours: number | null }>;
}

/** Every top-level key pg_stat_statements holds for `role`, against bpf_stats.query_stats. */
export async function compareWithPgss(admin: pg.Client, role: string): Promise<BurstComparison> {
  const { rows } = await admin.query(
    `SELECT s.queryid::text AS queryid, s.calls::int AS pgss, q.calls::int AS ours
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
      WHERE s.toplevel AND s.userid = $1::regrole AND s.query LIKE '%FROM burst WHERE id IN%'`,
    [role],
  );
  const notExact = rows.filter((r) => r.ours !== r.pgss);
  return {
    pgss: rows.length,
    exact: rows.length - notExact.length,
    missing: notExact.filter((r) => r.ours === null).length,
    wrongCalls: notExact.filter((r) => r.ours !== null).length,
    examples: notExact.slice(0, 5).map((r) => ({ queryid: r.queryid, pgss: r.pgss, ours: r.ours })),
  };
}
