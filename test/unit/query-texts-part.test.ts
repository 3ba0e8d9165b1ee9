import { Kysely } from 'kysely';
import type pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { QueryTextsPart } from '../../src/flush/query-texts-part.js';
import type { QueryRow } from '../../src/storage/metric-row.js';
import { WITHHELD_TEXT } from '../../src/password-text.js';
import { compileOnlyDialect } from '../support/compile-only-dialect.js';

const row = (queryid: string): QueryRow => ({ userid: 10, dbid: 5, toplevel: true, queryid, values: [] });

/**
 * A node whose pg_stat_statements holds `known` texts (queryid -> text); counts its lookups:
 * `statements` one per statement (at most 1000 keys each), `lookups` the keys of each load()
 * made through `load` that sent any.
 */
function node(known: Map<string, string>) {
  const lookups: string[][] = [];
  const statements: Array<{ sql: string; ids: string[] }> = [];
  const client = {
    query: async (sql: string, params: unknown[][]) => {
      // Where the extension lives (looked up once): not a lookup of texts.
      if (/pg_extension/.test(sql)) return { rows: [{ name: 'public.pg_stat_statements' }] };
      const ids = params[3] as string[];
      statements.push({ sql, ids });
      return {
        rows: ids.filter((id) => known.has(id)).map((id) => ({ userid: 10, dbid: 5, toplevel: true, queryid: id, query: known.get(id)! })),
      };
    },
  } as unknown as pg.Client;
  const load = async (part: QueryTextsPart, rows: QueryRow[]) => {
    const from = statements.length;
    await part.load(rows, client, () => undefined);
    if (statements.length > from) lookups.push(statements.slice(from).flatMap((s) => s.ids));
  };
  return { client, lookups, statements, load };
}

describe('QueryTextsPart', () => {
  it('looks each text up once, writes it with the flush that commits, and not again', async () => {
    const part = new QueryTextsPart();
    const { load, lookups } = node(
      new Map([
        ['1', 'SELECT 1'],
        ['2', 'SELECT 2'],
      ]),
    );
    await load(part, [row('1'), row('2')]);
    const first = part.prepare();
    expect(first.statements).toHaveLength(1);
    // Not committed (the flush failed): the same texts go out with the next flush, without a lookup.
    await load(part, [row('1')]);
    expect(lookups).toEqual([['1', '2']]);
    const second = part.prepare();
    expect(second.statements).toHaveLength(1);
    second.commit();
    await load(part, [row('1'), row('2')]);
    expect(lookups).toHaveLength(1);
    expect(part.prepare().statements).toHaveLength(0);
  });

  it('looks a text pg_stat_statements does not hold yet up again later, with or without new figures', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const known = new Map<string, string>();
      const part = new QueryTextsPart();
      const { load, lookups } = node(known);
      await load(part, [row('7')]);
      await load(part, [row('7')]); // too soon: no second lookup
      expect(lookups).toHaveLength(1);
      known.set('7', 'SELECT pg_sleep($1)'); // the statement ended
      vi.advanceTimersByTime(600);
      await load(part, []);
      expect(lookups).toHaveLength(2);
      expect(part.prepare().statements).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('looks up again only the keys due, each after its own wait, however many wait', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const part = new QueryTextsPart();
      const { load, lookups } = node(new Map());
      const many = Array.from({ length: 10_000 }, (_, i) => row(String(i)));
      await load(part, many);
      expect(lookups).toHaveLength(1);
      expect(lookups[0]).toHaveLength(10_000);
      vi.advanceTimersByTime(250);
      await load(part, [row('late')]); // a new key is due at once, the others are not
      expect(lookups[1]).toEqual(['late']);
      expect(part.due()).toBe(false);
      vi.advanceTimersByTime(260); // 510 ms: the 10,000 are due (500 ms), 'late' is not (at 750)
      expect(part.due()).toBe(true);
      await load(part, []);
      expect(lookups[2]).toHaveLength(10_000);
      expect(lookups[2]).not.toContain('late');
      vi.advanceTimersByTime(250); // 760 ms: 'late' alone (the 10,000 wait 1 s now)
      await load(part, []);
      expect(lookups[3]).toEqual(['late']);
      vi.advanceTimersByTime(760); // 1,520 ms: the 10,000 again
      await load(part, []);
      expect(lookups[4]).toHaveLength(10_000);
      expect(lookups).toHaveLength(5);
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps the keys of a failed lookup due, and holds at most 50,000 keys under a flood', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const part = new QueryTextsPart();
      const { load, lookups } = node(new Map());
      const broken = {
        query: async () => Promise.reject(Object.assign(new Error('Connection terminated unexpectedly'), { code: undefined })),
      };
      await expect(part.load([row('1'), row('2')], broken as unknown as pg.Client, () => undefined)).rejects.toThrow(
        'Connection terminated',
      );
      expect(part.due()).toBe(true);
      await load(part, []);
      expect(lookups).toEqual([['1', '2']]);
      // A flood of distinct keys pg_stat_statements never holds: the oldest are forgotten.
      for (let round = 0; round < 12; round++) {
        vi.advanceTimersByTime(70_000);
        await load(
          part,
          Array.from({ length: 10_000 }, (_, i) => row(`f${round * 10_000 + i}`)),
        );
      }
      vi.advanceTimersByTime(70_000);
      await load(part, []);
      const last = lookups.at(-1)!;
      expect(last).toHaveLength(50_000);
      expect(new Set(last).size).toBe(50_000);
      expect(last).toContain('f119999');
      expect(last).not.toContain('f69999');
      // Keys forgotten before they are due leave places in the lookup queues: those stay bounded too.
      const queued = () => (part as unknown as { queued: number }).queued;
      for (let burst = 0; burst < 20; burst++) {
        vi.advanceTimersByTime(1);
        await load(
          part,
          Array.from({ length: 10_000 }, (_, i) => row(`b${burst * 10_000 + i}`)),
        );
        expect(queued()).toBeLessThanOrEqual(2 * 50_000 + 1024 + 10_000);
      }
    } finally {
      vi.useRealTimers();
    }
  });

  it('reads texts cut to 1024 characters, at most 1000 per statement, and holds at most 4096 unwritten', async () => {
    const part = new QueryTextsPart();
    const known = new Map(Array.from({ length: 6000 }, (_, i) => [String(i), `SELECT ${i}`] as [string, string]));
    const { load, statements } = node(known);
    await load(
      part,
      Array.from({ length: 6000 }, (_, i) => row(String(i))),
    );
    // The bound is in the SQL: the node's server cuts the text, the collector never receives it whole.
    expect(statements[0]!.sql).toMatch(/left\(s\.query, 1024\) END AS query\s+FROM public\.pg_stat_statements s/);
    expect(statements.map((s) => s.ids.length)).toEqual([1000, 1000, 1000, 1000, 96]);
    // The sink is away (nothing committed): no more texts are looked up until those are written.
    await load(part, [row('x')]);
    expect(statements).toHaveLength(5);
    part.prepare().commit();
    await load(part, []);
    expect(statements.slice(5).map((s) => s.ids.length)).toEqual([1000, 905]);
  });

  it('stores a placeholder for a text that may hold a password, as /metrics shows it', async () => {
    const part = new QueryTextsPart();
    const { load, statements } = node(
      new Map([
        ['1', "ALTER ROLE app PASSWORD 'hunter2'"],
        ['2', "SELECT dblink_connect('postgresql://u:hunter2@h/db')"],
        ['3', 'SELECT 1'],
      ]),
    );
    await load(part, [row('1'), row('2'), row('3')]);
    // Tested in SQL on the whole text too, before it is cut.
    expect(statements[0]!.sql).toMatch(
      /CASE WHEN \(s\.query OPERATOR\(pg_catalog\.~\*\) 'passw\(or\)\?d\|pwd' OR s\.query OPERATOR\(pg_catalog\.~\*\) '[^']+'\) THEN NULL/,
    );
    const compiled = part.prepare().statements[0]!.compile(new Kysely<unknown>({ dialect: compileOnlyDialect() }));
    const texts = compiled.parameters.find((p) => Array.isArray(p) && p.includes('SELECT 1')) as string[];
    expect(texts).toEqual([WITHHELD_TEXT, WITHHELD_TEXT, 'SELECT 1']);
    expect(JSON.stringify(compiled.parameters)).not.toContain('hunter2');
  });

  it('goes on without texts where pg_stat_statements is not installed, saying so once', async () => {
    const part = new QueryTextsPart();
    const lines: string[] = [];
    const missing = {
      query: async () => Promise.reject(Object.assign(new Error('relation "pg_stat_statements" does not exist'), { code: '42P01' })),
    };
    await part.load([row('1')], missing as unknown as pg.Client, (l) => lines.push(l));
    await part.load([row('2')], missing as unknown as pg.Client, (l) => lines.push(l));
    expect(lines).toHaveLength(1);
    expect(part.prepare().statements).toHaveLength(0);
  });
});
