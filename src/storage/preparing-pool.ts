import { createHash } from 'node:crypto';
import type { PostgresPool, PostgresPoolClient } from 'kysely';
import type pg from 'pg';
import { poolClient } from './client-database.js';

/** A text is prepared once it was sent this many times: a one-off statement stays unnamed. */
const PREPARE_AFTER = 3;
/** Statement texts counted, and named, at most (each named one holds a plan in the writer's backend). */
const MAX_COUNTED = 256;
const MAX_NAMED = 32;
/**
 * The server's answers that say a named statement cannot be used, before it ran: no such
 * statement (a pooler in transaction mode gave another server connection), one of that name
 * already there (the same), a cached plan whose result type changed under it (a migration).
 */
const UNUSABLE = new Set(['26000', '42P05', '0A000']);

/**
 * The writer's pool for kysely, running a statement text it has sent before as a named
 * prepared statement: the server parses and plans it once per connection instead of every time.
 * A flush is one statement of the same text flush after flush (the parts present decide it, the
 * rows are array parameters): parsing its 15 kB took 1.3–1.8 ms of the server's 4.5 for 100
 * changed rows (bench/journal/flush-cost.md#flush-cost-by-what-changed).
 *
 * Bounded: at most MAX_NAMED texts are named, and the counts of texts seen stop at MAX_COUNTED.
 * Where the server cannot take named statements (a pooler in transaction mode before PgBouncer
 * 1.21), the first failure turns naming off for good and the statement is sent again unnamed: the
 * server refused it before running it, so nothing runs twice.
 *
 * @example
 * const db = new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool: preparingPool(pool) }) });
 */
export function preparingPool(pool: pg.Pool): PostgresPool {
  const statements = new PreparedStatements();
  return {
    connect: async () => lend(await pool.connect(), statements),
    end: () => pool.end(),
  };
}

/** Which statement texts go named, by their hash. */
export class PreparedStatements {
  private readonly seen = new Map<string, number>();
  private readonly named = new Set<string>();
  private off = false;

  /** The name to send `text` under, or null to send it unnamed. */
  nameFor(text: string): string | null {
    if (this.off) return null;
    const name = `pgbpf_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
    if (this.named.has(name)) return name;
    const times = (this.seen.get(name) ?? 0) + 1;
    if (times < PREPARE_AFTER || this.named.size >= MAX_NAMED) {
      if (this.seen.has(name) || this.seen.size < MAX_COUNTED) this.seen.set(name, times);
      return null;
    }
    this.seen.delete(name);
    this.named.add(name);
    return name;
  }

  /** Whether `error` says a named statement cannot be used here; if so, none is used from now on. */
  refused(error: unknown): boolean {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code !== 'string' || !UNUSABLE.has(code)) return false;
    this.off = true;
    return true;
  }

  /** Texts named so far. */
  get size(): number {
    return this.named.size;
  }
}

function lend(client: pg.PoolClient, statements: PreparedStatements): PostgresPoolClient {
  const run = async (text: string, values: unknown[]): Promise<pg.QueryResult> => {
    const name = statements.nameFor(text);
    if (!name) return client.query(text, values);
    try {
      return await client.query({ name, text, values });
    } catch (error) {
      if (!statements.refused(error)) throw error;
      return client.query(text, values);
    }
  };
  return poolClient(
    run,
    () => client.release(),
    (cursor) => client.query(cursor as never) as unknown as typeof cursor,
  );
}
