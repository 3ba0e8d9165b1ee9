import { sql } from 'kysely';
import type pg from 'pg';
import { oneLine } from '../errors.js';
import type { FlushPart, PreparedPart } from '../families/flush-part.js';
import type { QueryRow } from '../storage/metric-row.js';
import { queryIdentityKey } from '../collector/map-samples.js';
import { statementsRelation } from '../storage/pinned-session.js';
import { holdsPasswordSql, mayHoldPassword, WITHHELD_TEXT } from '../password-text.js';

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
/**
 * A text is cut here, in SQL, before it reaches the collector (as track_activity_query_size's
 * default cuts pg_stat_activity.query): any role can put megabytes into pg_stat_statements, and
 * the collector must not hold them. 1024 characters: at most 4 KB on the wire, 2 KB in V8's heap.
 */
export const QUERY_TEXT_MAX_CHARS = 1024;
/** Keys looked up per statement: one answer holds at most this many texts (4 MB on the wire at worst). */
const LOOKUP_BATCH = 1000;
/**
 * Texts found but not written yet (the sink is away): no more are looked up until they are, so
 * the texts held stay under PENDING_MAX x QUERY_TEXT_MAX_CHARS (4 MB of ASCII, 8 MB at worst).
 */
const PENDING_MAX = 4096;

/** A pg_stat_statements key: what a text is looked up and written by. */
interface TextKey {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: string;
}

interface TextRow extends TextKey {
  /** null: read as NULL, for a text that may hold a password (replaced by WITHHELD_TEXT). */
  query: string | null;
}

/** A key without a text yet: when it is looked up next, and how long it waits after that. */
interface MissingText {
  query: TextKey;
  since: number;
  next: number;
  wait: number;
  /** The wait `next` was set with (0: due when queued): the queue it waits in. */
  queue: number;
}

/** A key's place in a lookup queue (skipped once the key is forgotten or found: `missing` no longer holds that entry). */
interface QueuedLookup {
  key: string;
  entry: MissingText;
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
  private readonly missing = new Map<string, MissingText>();
  /**
   * The keys of `missing` in the order they are due: one queue per wait, each in time order
   * because a key joins it that wait after a lookup, and lookups go forward in time (queue 0
   * holds keys due when they joined it, so any order is right there). A flush takes
   * what is due from the queues' heads, so it costs what is due, not the (up to WRITTEN_MAX)
   * keys waiting. A key is queued once at a time (taken before it is queued again, so its `next` does
   * not change while queued); a key forgotten meanwhile leaves a stale place, skipped at the head
   * and dropped when stale places outnumber the live ones.
   */
  private readonly queues = new Map<number, LookupQueue>();
  private queued = 0;
  private unavailableUntil = 0;
  /** pg_stat_statements, qualified by its extension's schema (the session's path is pinned to pg_catalog); looked up again after a failure. */
  private relation: string | null = null;
  /** Keys new to this run since takeNewKeys() (the row retention's burst signal). */
  private newKeys = 0;

  /** How many query keys this run saw for the first time since the last call. */
  takeNewKeys(): number {
    const n = this.newKeys;
    this.newKeys = 0;
    return n;
  }

  /** Keys whose rows the row retention deleted: their texts are looked up again if they come back. */
  forget(keys: ReadonlyArray<{ userid: number; dbid: number; toplevel: boolean; queryid: string }>): void {
    for (const key of keys) this.written.delete(queryIdentityKey(key));
  }

  /** Whether a flush has texts to write, or keys to look up again. */
  due(): boolean {
    if (this.pending.size > 0) return true;
    const now = performance.now();
    return now >= this.unavailableUntil && this.nextLookupAt() <= now;
  }

  /** performance.now() when the first key of `missing` is looked up again (Infinity: none waits). */
  private nextLookupAt(): number {
    let next = Infinity;
    for (const queue of this.queues.values()) {
      const head = this.liveHead(queue);
      if (head && head.entry.next < next) next = head.entry.next;
    }
    return next;
  }

  /** The queue's first place whose key still waits for that lookup, stale places before it dropped. */
  private liveHead(queue: LookupQueue): QueuedLookup | undefined {
    for (let head = queue.peek(); head; head = queue.peek()) {
      if (this.missing.get(head.key) === head.entry) return head;
      queue.shift();
      this.queued--;
    }
    return undefined;
  }

  private enqueue(key: string, entry: MissingText): void {
    let queue = this.queues.get(entry.queue);
    if (!queue) this.queues.set(entry.queue, (queue = new LookupQueue()));
    queue.push({ key, entry });
    this.queued++;
  }

  /** Keys forgotten while queued (the bound of `missing`) leave stale places: the queues are rebuilt past twice the live ones. */
  private compact(): void {
    if (this.queued <= 2 * this.missing.size + 1024) return;
    this.queues.clear();
    this.queued = 0;
    for (const [key, entry] of [...this.missing].sort(([, a], [, b]) => a.next - b.next)) this.enqueue(key, entry);
  }

  /** At most `limit` keys due by `now`, taken from the queues' heads (the rest stay due). */
  private takeDue(now: number, limit: number): Array<[string, MissingText]> {
    const due: Array<[string, MissingText]> = [];
    for (const queue of this.queues.values()) {
      for (let head = this.liveHead(queue); head && head.entry.next <= now && due.length < limit; head = this.liveHead(queue)) {
        queue.shift();
        this.queued--;
        due.push([head.key, head.entry]);
      }
    }
    return due;
  }

  /** Looks up the texts of `queries` not written yet on the node (one statement, only when there are some). */
  async load(queries: readonly QueryRow[], node: pg.Client, log: (line: string) => void): Promise<void> {
    const now = performance.now();
    if (now < this.unavailableUntil) return;
    this.compact();
    for (const query of queries) {
      const key = queryIdentityKey(query);
      if (this.written.has(key) || this.pending.has(key) || this.missing.has(key)) continue;
      const { userid, dbid, toplevel, queryid } = query;
      const entry = { query: { userid, dbid, toplevel, queryid }, since: now, next: 0, wait: RETRY_MS, queue: 0 };
      this.newKeys++;
      remember(this.missing, key, entry);
      this.enqueue(key, entry);
    }
    // In batches, so no one answer holds more than LOOKUP_BATCH texts.
    while (await this.lookUpDue(now, node, log));
  }

  /** Looks up one batch of the keys due; returns whether a full batch was looked up (more may be due). */
  private async lookUpDue(now: number, node: pg.Client, log: (line: string) => void): Promise<boolean> {
    const due = this.takeDue(now, Math.min(LOOKUP_BATCH, PENDING_MAX - this.pending.size));
    if (!due.length) return false;
    const wanted = due.map(([, m]) => m.query);
    let rows: TextRow[];
    try {
      this.relation ??= await statementsRelation(node);
      if (!this.relation)
        throw Object.assign(new Error('extension "pg_stat_statements" is not installed in this database'), { code: '42P01' });
      ({ rows } = await node.query<TextRow>(
        // A text that may hold a password is not read (tested on the whole text, before the cut).
        `SELECT s.userid, s.dbid, s.toplevel, s.queryid::text AS queryid,
                CASE WHEN ${holdsPasswordSql('s.query')} THEN NULL ELSE pg_catalog.left(s.query, ${QUERY_TEXT_MAX_CHARS}) END AS query
           FROM ${this.relation} s
          WHERE (s.userid, s.dbid, s.toplevel, s.queryid) IN
                (SELECT * FROM unnest($1::oid[], $2::oid[], $3::bool[], $4::int8[]))`,
        [wanted.map((q) => q.userid), wanted.map((q) => q.dbid), wanted.map((q) => q.toplevel), wanted.map((q) => q.queryid)],
      ));
    } catch (error) {
      this.relation = null;
      // The keys due now still are, at the next flush or once it is readable again.
      for (const [key, m] of due) {
        m.queue = 0;
        this.enqueue(key, m);
      }
      // Not installed in the node's database (or not readable by this role): figures go on without texts.
      if (
        (error as { code?: string }).code !== '42P01' &&
        (error as { code?: string }).code !== '42501' &&
        (error as { code?: string }).code !== '55000'
      )
        throw error;
      if (!this.unavailableUntil)
        log(
          `query texts: pg_stat_statements is not readable in the node's database, figures go without texts (tried again every minute): ${oneLine(error)}`,
        );
      this.unavailableUntil = now + UNAVAILABLE_MS;
      return false;
    }
    for (const row of rows) {
      // Stored as a placeholder, as /metrics shows it: the figures stay, the secret does not.
      if (row.query === null || mayHoldPassword(row.query)) row.query = WITHHELD_TEXT;
      this.pending.set(queryIdentityKey(row), row);
      this.missing.delete(queryIdentityKey(row));
    }
    for (const [key, m] of due) {
      if (this.pending.has(key)) continue;
      m.next = now + m.wait;
      m.queue = m.wait;
      m.wait = now - m.since < RETRY_SOON_FOR_MS ? Math.min(2 * m.wait, RETRY_SOON_MS) : RETRY_LATE_MS;
      this.enqueue(key, m);
    }
    return due.length === LOOKUP_BATCH;
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

/** A first-in first-out queue that drops its taken places in bulk (Array.shift is linear). */
class LookupQueue {
  private items: QueuedLookup[] = [];
  private head = 0;

  peek(): QueuedLookup | undefined {
    return this.items[this.head];
  }

  shift(): void {
    this.head++;
    if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }

  push(item: QueuedLookup): void {
    this.items.push(item);
  }
}

/** Sets `key` in a bounded map, forgetting the oldest entry when it is full. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > WRITTEN_MAX) map.delete(map.keys().next().value!);
}
