import { Kysely, PostgresDialect, type PostgresCursor, type PostgresPool, type PostgresPoolClient, type PostgresQueryResult } from 'kysely';
import type pg from 'pg';
import type { BpfStatsDatabase } from './database.js';

/**
 * Typed statements over one connection the caller owns: a single-connection "pool" that lends
 * out `client` and never ends it. For connections kysely cannot open itself: the control
 * connection, whose backend pid must be known and excluded before it runs anything.
 *
 * @example
 * const db = clientDatabase(client);
 * await db.deleteFrom('bpf_stats.capabilities').where('host', '=', host).execute();
 */
export function clientDatabase(client: pg.ClientBase): Kysely<BpfStatsDatabase> {
  const pool: PostgresPool = {
    connect: async () => lent(client),
    end: async () => undefined,
  };
  return new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool }) });
}

function lent(client: pg.ClientBase): PostgresPoolClient {
  return poolClient(
    (text, values) => client.query(text, values),
    () => undefined,
    () => {
      throw new Error('streaming is not supported on a lent connection');
    },
  );
}

/**
 * kysely's view of one pg connection: statements go through `run` (which may name them, see
 * preparingPool), cursors through `cursor`, results in kysely's shape.
 */
export function poolClient(
  run: (text: string, values: unknown[]) => Promise<pg.QueryResult>,
  release: () => void,
  cursor: <R>(cursor: PostgresCursor<R>) => PostgresCursor<R>,
): PostgresPoolClient {
  function query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  function query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>;
  function query<R>(
    sql: string | PostgresCursor<R>,
    parameters?: ReadonlyArray<unknown>,
  ): Promise<PostgresQueryResult<R>> | PostgresCursor<R> {
    if (typeof sql !== 'string') return cursor(sql);
    return run(sql, [...(parameters ?? [])]).then((result) => ({
      command: result.command as PostgresQueryResult<R>['command'],
      rowCount: result.rowCount ?? 0,
      rows: result.rows as R[],
    }));
  }
  return { query, release };
}
