import { sql } from 'kysely';
import type pg from 'pg';
import { oneLine } from '../errors.js';
import type { FlushPart, PreparedPart } from '../flush/flush-part.js';
import type { QueryRow } from '../storage/metric-row.js';
import { queryIdentityKey } from '../collector/map-samples.js';

/** Keys whose text was written, remembered so it is not looked up again (oldest forgotten first). */
const WRITTEN_MAX = 50_000;
/**
 * A query pg_stat_statements did not know yet (it stores one when the statement ends, so a long
 * one has figures before it has a text) is looked up again after RETRY_MS, then at most every
 * RETRY_SOON_MS for RETRY_SOON_FOR_MS, then every RETRY_LATE_MS, whether or not it has new
 * figures: its text shows within seconds of the statement's end, and a key pg_stat_statements
 * never holds costs one lookup a minute.
 */
const RETRY_MS = 500;
const RETRY_SOON_MS = 2_000;
const RETRY_SOON_FOR_MS = 60_000;
const RETRY_LATE_MS = 60_000;
/** After pg_stat_statements could not be read (not installed in the node's database), try again after this. */
const UNAVAILABLE_MS = 60_000;

/** A pg_stat_statements key: what a text is looked up and written by. */
interface TextKey {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: string;
}

interface TextRow extends TextKey {
  query: string;
}

/**
 * bpf_stats.query_texts' part of a flush: the texts of the queries a flush writes figures for,
 * read from the node's pg_stat_statements (load(), before the flush) and written in the same
 * statement as the figures, so a sink shows them without the node. Each text is written once
 * per run; a query pg_stat_statements does not hold (yet) is looked up again later.
 *
 * @example
 * await texts.load(rows.prepare(maps, measured).queries, nodeClient, log);
 * new FlushWriter(db, [new QueryStatsPart(db, rows), texts, ...]);
 */
export class QueryTextsPart implements FlushPart {
  readonly name = 'query_texts';
  private readonly written = new Map<string, true>();
  private readonly pending = new Map<string, TextRow>();
  /**
   * Keys without a text yet: when to look again, and how long to wait after that. The key only,
   * not its row: under a flood of distinct statements that pg_stat_statements deallocates
   * before they are looked up, this map stays full (WRITTEN_MAX).
   */
  private readonly missing = new Map<string, { query: TextKey; since: number; next: number; wait: number }>();
  private unavailableUntil = 0;
  /** performance.now() when the first key of `missing` is looked up again. */
  private nextLookupAt = Infinity;

  /** Whether a flush has texts to write, or keys to look up again. */
  due(): boolean {
    return this.pending.size > 0 || (performance.now() >= this.nextLookupAt && performance.now() >= this.unavailableUntil);
  }

  /** Looks up the texts of `queries` not written yet on the node (one statement, only when there are some). */
  async load(queries: readonly QueryRow[], node: pg.Client, log: (line: string) => void): Promise<void> {
    const now = performance.now();
    if (now < this.unavailableUntil) return;
    for (const query of queries) {
      const key = queryIdentityKey(query);
      if (this.written.has(key) || this.pending.has(key) || this.missing.has(key)) continue;
      const { userid, dbid, toplevel, queryid } = query;
      remember(this.missing, key, { query: { userid, dbid, toplevel, queryid }, since: now, next: 0, wait: RETRY_MS });
    }
    const due = [...this.missing.values()].filter((m) => m.next <= now);
    this.nextLookupAt = Infinity;
    for (const m of this.missing.values()) if (m.next > now) this.nextLookupAt = Math.min(this.nextLookupAt, m.next);
    if (!due.length) return;
    const wanted = due.map((m) => m.query);
    let rows: TextRow[];
    try {
      ({ rows } = await node.query<TextRow>(
        `SELECT s.userid, s.dbid, s.toplevel, s.queryid::text AS queryid, s.query
           FROM pg_stat_statements s
          WHERE (s.userid, s.dbid, s.toplevel, s.queryid) IN
                (SELECT * FROM unnest($1::oid[], $2::oid[], $3::bool[], $4::int8[]))`,
        [wanted.map((q) => q.userid), wanted.map((q) => q.dbid), wanted.map((q) => q.toplevel), wanted.map((q) => q.queryid)],
      ));
    } catch (error) {
      // Not installed in the node's database (or not readable by this role): figures go on without texts.
      if ((error as { code?: string }).code !== '42P01' && (error as { code?: string }).code !== '42501' && (error as { code?: string }).code !== '55000') throw error;
      if (!this.unavailableUntil) log(`query texts: pg_stat_statements is not readable in the node's database, figures go without texts (tried again every minute): ${oneLine(error)}`);
      this.unavailableUntil = now + UNAVAILABLE_MS;
      this.nextLookupAt = now; // the keys due now still are, once it is readable again
      return;
    }
    for (const row of rows) {
      this.pending.set(queryIdentityKey(row), row);
      this.missing.delete(queryIdentityKey(row));
    }
    for (const m of due) {
      if (this.pending.has(queryIdentityKey(m.query))) continue;
      m.next = now + m.wait;
      m.wait = now - m.since < RETRY_SOON_FOR_MS ? Math.min(2 * m.wait, RETRY_SOON_MS) : RETRY_LATE_MS;
      this.nextLookupAt = Math.min(this.nextLookupAt, m.next);
    }
  }

  prepare(): PreparedPart {
    const rows = [...this.pending.values()];
    if (!rows.length) return { statements: [], commit: () => undefined };
    const statement = sql`
      INSERT INTO bpf_stats.query_texts AS t (userid, dbid, toplevel, queryid, query)
      SELECT * FROM unnest(${rows.map((r) => r.userid)}::oid[], ${rows.map((r) => r.dbid)}::oid[],
                           ${rows.map((r) => r.toplevel)}::bool[], ${rows.map((r) => r.queryid)}::int8[],
                           ${rows.map((r) => r.query)}::text[])
      ON CONFLICT (node, userid, dbid, toplevel, queryid) DO UPDATE
         SET query = excluded.query, last_seen = now()`;
    return {
      statements: [statement],
      commit: () => {
        for (const row of rows) {
          const key = queryIdentityKey(row);
          this.pending.delete(key);
          remember(this.written, key, true);
        }
      },
    };
  }
}

/** Sets `key` in a bounded map, forgetting the oldest entry when it is full. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > WRITTEN_MAX) map.delete(map.keys().next().value!);
}
