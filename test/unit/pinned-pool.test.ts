import { EventEmitter } from 'node:events';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors.js';
import { pinnedOnConnect } from '../../src/storage/pinned-session.js';

/**
 * A pg Client that connects at once and answers the search_path check with `path`; it records
 * every statement and whether it was ended. Given to a real pg.Pool (its `Client` option), so
 * the test runs pg-pool's own onConnect handling, as the collector's writer and control pools do.
 */
function fakeClients(path: string) {
  const seen: string[] = [];
  let ended = 0;
  class FakeClient extends EventEmitter {
    processID = 4242;
    // What pg-pool looks at to keep a released client.
    _queryable = true;
    connect(callback: (error?: Error) => void): void {
      setImmediate(() => callback());
    }
    // As pg's: a promise, or the callback (pg-pool's pool.query passes one, after the values).
    query(text: string | { text: string }, ...rest: unknown[]): Promise<{ rows: unknown[] }> | undefined {
      const sql = typeof text === 'string' ? text : text.text;
      seen.push(sql);
      const result = { rows: /current_setting\('search_path'\)/.test(sql) ? [{ path }] : [{ one: 1 }] };
      const callback = rest.find((r) => typeof r === 'function') as ((error: Error | null, result: unknown) => void) | undefined;
      if (!callback) return Promise.resolve(result);
      setImmediate(() => callback(null, result));
      return undefined;
    }
    end(callback?: () => void): Promise<void> {
      ended++;
      setImmediate(() => {
        this.emit('end');
        callback?.();
      });
      return Promise.resolve();
    }
  }
  return { Client: FakeClient as unknown as new () => pg.ClientBase, seen, ended: () => ended };
}

describe("the collector's pools check each new session's search_path before using it", () => {
  it('ends a session without the pinned path (a pooler dropped the startup options): the caller statement never runs', async () => {
    const { Client, seen, ended } = fakeClients('"$user", public');
    const lines: string[] = [];
    const excluded: number[] = [];
    const pool = new pg.Pool({
      Client,
      max: 1,
      onConnect: pinnedOnConnect(
        'writer',
        (line) => lines.push(line),
        (c) => void excluded.push((c as unknown as { processID: number }).processID),
      ),
    });
    try {
      await expect(pool.query('INSERT INTO bpf_stats.query_stats VALUES (1)')).rejects.toThrow(UserError);
      expect(seen).toEqual(["SELECT pg_catalog.current_setting('search_path') AS path"]);
      expect(ended()).toBe(1);
      // Excluded before its first statement, as before the check existed.
      expect(excluded).toEqual([4242]);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^writer connection: closing it: the server did not apply the collector's search_path/);
    } finally {
      await pool.end();
    }
  });

  it('uses a session with the pinned path', async () => {
    const { Client, seen, ended } = fakeClients('pg_catalog,pg_temp');
    const lines: string[] = [];
    const pool = new pg.Pool({ Client, max: 1, onConnect: pinnedOnConnect('control', (line) => lines.push(line)) });
    try {
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      expect(seen).toEqual(["SELECT pg_catalog.current_setting('search_path') AS path", 'SELECT 1 AS one']);
      expect(ended()).toBe(0);
      expect(lines).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('ends a session whose backend could not be excluded, without checking it', async () => {
    const { Client, seen, ended } = fakeClients('pg_catalog,pg_temp');
    const lines: string[] = [];
    const pool = new pg.Pool({
      Client,
      max: 1,
      onConnect: pinnedOnConnect(
        'writer',
        (line) => lines.push(line),
        () => {
          throw new Error('cannot exclude its backend: map full');
        },
      ),
    });
    try {
      await expect(pool.query('SELECT 1')).rejects.toThrow(/cannot exclude its backend/);
      expect(seen).toEqual([]);
      expect(ended()).toBe(1);
      expect(lines).toEqual(['writer connection: closing it: cannot exclude its backend: map full']);
    } finally {
      await pool.end();
    }
  });
});
