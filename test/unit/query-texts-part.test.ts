import type pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { QueryTextsPart } from '../../src/sink/query-texts-part.js';
import type { QueryRow } from '../../src/storage/metric-row.js';

const row = (queryid: string): QueryRow => ({ userid: 10, dbid: 5, toplevel: true, queryid, values: [] });

/** A node whose pg_stat_statements holds `known` texts (queryid -> text); counts its lookups. */
function node(known: Map<string, string>) {
  const lookups: string[][] = [];
  const client = {
    query: async (_sql: string, params: unknown[][]) => {
      const ids = params[3] as string[];
      lookups.push(ids);
      return { rows: ids.filter((id) => known.has(id)).map((id) => ({ userid: 10, dbid: 5, toplevel: true, queryid: id, query: known.get(id)! })) };
    },
  };
  return { client: client as unknown as pg.Client, lookups };
}

describe('QueryTextsPart', () => {
  it('looks each text up once, writes it with the flush that commits, and not again', async () => {
    const part = new QueryTextsPart();
    const { client, lookups } = node(new Map([['1', 'SELECT 1'], ['2', 'SELECT 2']]));
    await part.load([row('1'), row('2')], client, () => undefined);
    const first = part.prepare();
    expect(first.statements).toHaveLength(1);
    // Not committed (the flush failed): the same texts go out with the next flush, without a lookup.
    await part.load([row('1')], client, () => undefined);
    expect(lookups).toEqual([['1', '2']]);
    const second = part.prepare();
    expect(second.statements).toHaveLength(1);
    second.commit();
    await part.load([row('1'), row('2')], client, () => undefined);
    expect(lookups).toHaveLength(1);
    expect(part.prepare().statements).toHaveLength(0);
  });

  it('looks a text pg_stat_statements does not hold yet up again later, with or without new figures', async () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const known = new Map<string, string>();
      const part = new QueryTextsPart();
      const { client, lookups } = node(known);
      await part.load([row('7')], client, () => undefined);
      await part.load([row('7')], client, () => undefined); // too soon: no second lookup
      expect(lookups).toHaveLength(1);
      known.set('7', 'SELECT pg_sleep($1)'); // the statement ended
      vi.advanceTimersByTime(600);
      await part.load([], client, () => undefined);
      expect(lookups).toHaveLength(2);
      expect(part.prepare().statements).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('goes on without texts where pg_stat_statements is not installed, saying so once', async () => {
    const part = new QueryTextsPart();
    const lines: string[] = [];
    const missing = { query: async () => Promise.reject(Object.assign(new Error('relation "pg_stat_statements" does not exist'), { code: '42P01' })) };
    await part.load([row('1')], missing as unknown as pg.Client, (l) => lines.push(l));
    await part.load([row('2')], missing as unknown as pg.Client, (l) => lines.push(l));
    expect(lines).toHaveLength(1);
    expect(part.prepare().statements).toHaveLength(0);
  });
});
