import pg from 'pg';
import { oneLine } from '../../errors.js';
import { backendPid } from '../../storage/backend-pid.js';
import { clientConfig } from '../../storage/connection-string.js';
import { pinnedConfig, statementsRelation } from '../../storage/pinned-session.js';
import { holdsPasswordSql, mayHoldPassword, WITHHELD_TEXT } from '../../password-text.js';

const RETRY_MS = 10_000;
/** Query text is cut here in the info metric: a label, not a document. */
export const QUERY_TEXT_MAX = 200;

/**
 * Database and role names for the `datname` and `user` labels, and (only when asked for) query
 * text from pg_stat_statements, looked up in the background on the exporter's own connection:
 * never on the flush path, and a scrape only reads what is known. One lookup at a time, only
 * for oids not seen before, so a steady state costs no query at all.
 *
 * @example
 * const names = new CatalogNames(dsn, (pid) => sidecar.excludeBackend(pid), log);
 * names.want([5], [10]);      // after a flush
 * names.database(5);          // 'postgres' once looked up, undefined before
 */
export class CatalogNames {
  private readonly databases = new Map<number, string>();
  private readonly users = new Map<number, string>();
  private readonly texts = new Map<string, string | null>();
  private readonly wantedDatabases = new Set<number>();
  private readonly wantedUsers = new Set<number>();
  private wantedTexts = new Map<string, { userid: number; dbid: number; queryid: string }>();
  private client: pg.Client | null = null;
  private busy = false;
  private failedAt = 0;
  private warned = false;

  constructor(
    private readonly connectionString: string | undefined,
    /** Called with the backend pid of the exporter's connection (the collector leaves it out). */
    private readonly onConnect: (pid: number) => void,
    private readonly log: (line: string) => void,
    /** Text for at most this many statements is kept (the exported top N). */
    private readonly maxTexts = 0,
  ) {}

  database(dbid: number): string | undefined {
    return this.databases.get(dbid);
  }

  user(userid: number): string | undefined {
    return this.users.get(userid);
  }

  /** The statement's text (cut to QUERY_TEXT_MAX), null when pg_stat_statements has none, undefined before it was looked up. */
  text(userid: number, dbid: number, queryid: string): string | null | undefined {
    return this.texts.get(`${userid}/${dbid}/${queryid}`);
  }

  /** Asks for the names of these oids, if not known yet (the lookup runs in the background). */
  want(dbids: Iterable<number>, userids: Iterable<number>): void {
    for (const id of dbids) if (!this.databases.has(id)) this.wantedDatabases.add(id);
    for (const id of userids) if (!this.users.has(id)) this.wantedUsers.add(id);
    this.schedule();
  }

  /** Asks for the text of these statements (the current top N); texts of others are forgotten. */
  wantTexts(statements: ReadonlyArray<{ userid: number; dbid: number; queryid: string }>): void {
    const keep = new Set(statements.map((s) => `${s.userid}/${s.dbid}/${s.queryid}`));
    for (const key of this.texts.keys()) if (!keep.has(key)) this.texts.delete(key);
    this.wantedTexts = new Map(
      statements
        .filter((s) => !this.texts.has(`${s.userid}/${s.dbid}/${s.queryid}`))
        .slice(0, this.maxTexts)
        .map((s) => [`${s.userid}/${s.dbid}/${s.queryid}`, s]),
    );
    this.schedule();
  }

  async close(): Promise<void> {
    await this.client?.end().catch(() => undefined);
    this.client = null;
  }

  private schedule(): void {
    if (this.busy || Date.now() - this.failedAt < RETRY_MS) return;
    if (!this.wantedDatabases.size && !this.wantedUsers.size && !this.wantedTexts.size) return;
    this.busy = true;
    void this.lookUp()
      .catch((error: unknown) => {
        this.failedAt = Date.now();
        if (!this.warned) this.log(`metrics: cannot look up names (will retry): ${oneLine(error)}`);
        this.warned = true;
        void this.close();
      })
      .finally(() => (this.busy = false));
  }

  private async lookUp(): Promise<void> {
    const client = await this.connection();
    const dbids = [...this.wantedDatabases];
    const userids = [...this.wantedUsers];
    const texts = [...this.wantedTexts.values()];
    if (dbids.length) {
      const { rows } = await client.query<{ oid: number; datname: string }>(
        'SELECT oid::int8::float8 AS oid, datname FROM pg_database WHERE oid = ANY($1::oid[])',
        [dbids],
      );
      for (const id of dbids) this.databases.set(id, rows.find((r) => Number(r.oid) === id)?.datname ?? String(id));
      for (const id of dbids) this.wantedDatabases.delete(id);
    }
    if (userids.length) {
      const { rows } = await client.query<{ oid: number; rolname: string }>(
        'SELECT oid::int8::float8 AS oid, rolname FROM pg_roles WHERE oid = ANY($1::oid[])',
        [userids],
      );
      for (const id of userids) this.users.set(id, rows.find((r) => Number(r.oid) === id)?.rolname ?? String(id));
      for (const id of userids) this.wantedUsers.delete(id);
    }
    if (texts.length) {
      const found = new Map<string, string>();
      // Qualified by the schema the extension is in: the session's path holds only pg_catalog.
      const relation = await statementsRelation(client);
      if (relation) {
        const { rows } = await client.query<{ key: string; query: string | null }>(
          `SELECT DISTINCT ON (userid, dbid, queryid) userid || '/' || dbid || '/' || queryid AS key,
                  CASE WHEN ${holdsPasswordSql('query')} THEN NULL ELSE left(query, ${QUERY_TEXT_MAX}) END AS query
             FROM ${relation} WHERE queryid = ANY($1::int8[])`,
          [texts.map((t) => t.queryid)],
        );
        for (const row of rows)
          found.set(row.key, row.query === null || mayHoldPassword(row.query) ? WITHHELD_TEXT : row.query.replace(/\s+/g, ' ').trim());
      }
      for (const t of texts) {
        const key = `${t.userid}/${t.dbid}/${t.queryid}`;
        this.texts.set(key, found.get(key) ?? null);
        this.wantedTexts.delete(key);
      }
    }
  }

  private async connection(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = new pg.Client(pinnedConfig({ ...clientConfig(this.connectionString), application_name: 'pg-bpf-stats metrics' }));
    client.on('error', () => {
      if (this.client === client) this.client = null;
    });
    await client.connect();
    this.onConnect(backendPid(client));
    this.client = client;
    return client;
  }
}
