import { Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { FlushInput, FlushPart } from '../../src/families/flush-part.js';
import { FlushWriter } from '../../src/flush/flush-writer.js';
import { compileOnlyDialect } from '../support/compile-only-dialect.js';

/** A kysely that executes nothing and records every statement it was asked to send. */
function recordingDb(): { db: Kysely<unknown>; sent: string[] } {
  const sent: string[] = [];
  const db = new Kysely<unknown>({ dialect: compileOnlyDialect(), log: (event) => void sent.push(event.query.sql) });
  return { db, sent };
}

function part(name: string, statements: number, companion = false) {
  const calls: string[] = [];
  const p: FlushPart = {
    name,
    prepare: () => ({
      statements: Array.from({ length: statements }, () => sql`INSERT INTO t DEFAULT VALUES`),
      companion,
      commit: () => calls.push('commit'),
      ...(companion && { skipped: () => calls.push('skipped') }),
    }),
  };
  return { p, calls };
}

const input = {} as FlushInput;

describe('FlushWriter', () => {
  it('sends nothing when only companion statements (the health row) have something', async () => {
    const { db, sent } = recordingDb();
    const data = part('data', 0);
    const health = part('health', 1, true);
    expect(await new FlushWriter(db, [data.p, health.p]).write(input)).toBe(0);
    expect(sent).toEqual([]);
    // The companion keeps its statement for later; a part with nothing to say commits (baselines, evictions).
    expect(health.calls).toEqual(['skipped']);
    expect(data.calls).toEqual(['commit']);
  });

  it('lets a part that says what a flush sending nothing means to it keep what it prepared', async () => {
    const { db, sent } = recordingDb();
    const calls: string[] = [];
    const waiting: FlushPart = {
      name: 'waiting',
      prepare: () => ({ statements: [], commit: () => calls.push('commit'), skipped: () => calls.push('skipped') }),
    };
    expect(await new FlushWriter(db, [waiting, part('health', 1, true).p]).write(input)).toBe(0);
    expect(sent).toEqual([]);
    expect(calls).toEqual(['skipped']);
  });

  it("builds a companion's statements only when the flush is sent", async () => {
    const { db, sent } = recordingDb();
    let built = 0;
    const health: FlushPart = {
      name: 'health',
      prepare: () => ({
        statements: [],
        build: () => (built++, [sql`INSERT INTO h DEFAULT VALUES`]),
        companion: true,
        commit: () => undefined,
        skipped: () => undefined,
      }),
    };
    expect(await new FlushWriter(db, [part('data', 0).p, health]).write(input)).toBe(0);
    expect(built).toBe(0);
    expect(await new FlushWriter(db, [part('data', 1).p, health]).write(input)).toBe(2);
    expect(built).toBe(1);
    expect(sent[0]).toMatch(/"data_0" AS .*"health_0" AS \(INSERT INTO h/s);
  });

  it('sends one statement with the companions when a part has data, and commits every part', async () => {
    const { db, sent } = recordingDb();
    const data = part('data', 2);
    const health = part('health', 1, true);
    expect(await new FlushWriter(db, [data.p, health.p]).write(input)).toBe(3);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatch(/^WITH "data_0" AS .*"data_1" AS .*"health_0" AS .* SELECT 1/s);
    expect(data.calls).toEqual(['commit']);
    expect(health.calls).toEqual(['commit']);
  });

  it('sends a companion that must go out (a heartbeat) on its own', async () => {
    const { db, sent } = recordingDb();
    const health = part('health', 1, false);
    expect(await new FlushWriter(db, [part('data', 0).p, health.p]).write(input)).toBe(1);
    expect(sent).toHaveLength(1);
    expect(health.calls).toEqual(['commit']);
  });
});
