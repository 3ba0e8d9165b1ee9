import type pg from 'pg';
import { oneLine, UserError } from '../errors.js';

/**
 * The search_path of every session the collector opens. pg_catalog first and nothing any other
 * role can create objects in: a function or operator another role creates (public.*(bigint,
 * interval), public.format(...)) can never be a better match than the catalog's, so it never
 * runs as the collector's role. pg_temp last: only this session can create there, and naming it
 * keeps it from being searched first.
 */
export const PINNED_SEARCH_PATH = 'pg_catalog, pg_temp';
const PIN = '-c search_path=pg_catalog,pg_temp';

/**
 * `config` with the search path pinned in the connection's startup packet (libpq `options`).
 *
 * Why the startup packet and not a SET after connecting: it holds for every connection pg
 * opens from this config, before any statement runs, including the ones we never see open -
 * pg-pool's new clients and pg-listen's reconnects (which run LISTEN on their own) - and it is
 * the session's reset value, so RESET ALL / DISCARD ALL keep it. It also outranks a role's or
 * database's `ALTER ... SET search_path`.
 *
 * pg lets a connection string's own `options` replace the config's, so a URI's `options` is
 * moved out of it and kept ahead of ours (the last -c wins); without one, PGOPTIONS (or the
 * config's options) is kept the same way.
 *
 * @example
 * new pg.Pool(pinnedConfig({ connectionString: dsn, max: 1 }));
 */
export function pinnedConfig<T extends pg.ClientConfig>(config: T): T {
  let connectionString = config.connectionString;
  let base = config.options ?? process.env.PGOPTIONS;
  if (connectionString && /^postgres(ql)?:\/\//i.test(connectionString.trim())) {
    try {
      const url = new URL(connectionString.trim());
      const own = url.searchParams.get('options');
      if (own !== null) {
        url.searchParams.delete('options');
        connectionString = url.toString();
        base = own;
      }
    } catch {
      // Not a URI pg can read either: it fails when connecting, with its own message.
    }
  } else if (connectionString && /(^|\s)options\s*=/.test(connectionString)) {
    // A key=value string naming options would replace ours: refused rather than left unpinned.
    throw new UserError(
      'the connection string sets options=...: give them in PGOPTIONS instead (the collector adds its own search_path to them)',
    );
  }
  const options = base?.trim() ? `${base.trim()} ${PIN}` : PIN;
  return { ...config, ...(connectionString !== undefined && { connectionString }), options };
}

/**
 * Fails closed when a session did not get the pinned path (a pooler in front of the server that
 * drops startup options): the collector's statements would otherwise resolve names through a
 * path other roles can write to.
 */
export async function assertPinned(client: Pick<pg.ClientBase, 'query'>): Promise<void> {
  const { rows } = await client.query<{ path: string }>("SELECT pg_catalog.current_setting('search_path') AS path");
  // As the startup option gave it (no space), or as SET would show it.
  if (rows[0]?.path.replace(/\s+/g, '') !== PINNED_SEARCH_PATH.replace(/\s+/g, '')) {
    throw new UserError(
      `the server did not apply the collector's search_path (${PINNED_SEARCH_PATH}) from the connection's startup options: it has ${JSON.stringify(rows[0]?.path)}; connect to PostgreSQL directly, not through a pooler that drops startup options`,
    );
  }
}

/**
 * pg-pool's `onConnect` for a pool of the collector's (pg-pool waits for it before a new client
 * is used): `first` (excluding its backend, before it runs anything), then assertPinned(). A
 * failure is logged in one line and makes the pool end the client and fail the checkout that
 * opened it, so no statement of the caller runs in a session without the pinned path.
 *
 * @example
 * new pg.Pool(pinnedConfig({ ...config, onConnect: pinnedOnConnect('writer', log, (c) => exclude(c)) }));
 */
export function pinnedOnConnect(
  what: string,
  log: (line: string, topic?: string) => void,
  first?: (client: pg.ClientBase) => void,
): (client: pg.ClientBase) => Promise<void> {
  return async (client) => {
    try {
      first?.(client);
      await assertPinned(client);
    } catch (error) {
      log(`${what} connection: closing it: ${oneLine(error)}`, `${what} connection refused`);
      throw error;
    }
  };
}

/**
 * The quoted, schema-qualified name of pg_stat_statements in this database (it lives wherever
 * CREATE EXTENSION put it, not necessarily public), or null when it is not installed. With the
 * path pinned an unqualified name would not find it, and must not: the schema it is in may be
 * writable by others.
 */
export async function statementsRelation(client: Pick<pg.Client, 'query'>): Promise<string | null> {
  const { rows } = await client.query<{ name: string }>(STATEMENTS_RELATION_SQL);
  return rows[0]?.name ?? null;
}

/** The statement statementsRelation() runs, for callers that hold a Kysely instead of a client. */
export const STATEMENTS_RELATION_SQL = `SELECT pg_catalog.quote_ident(n.nspname) || '.pg_stat_statements' AS name
   FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
  WHERE e.extname = 'pg_stat_statements'`;
