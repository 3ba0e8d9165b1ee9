import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { readHeldQueryKeys } from '../../src/retention/held-query-keys.js';
import { unheldBounds } from '../../src/retention/row-retention.js';

/** A node answering the settings/activity statement with `first`, and the pg_stat_statements read with `keys` (or failing with `error`). */
function node(first: Record<string, unknown>, keys?: Record<string, unknown>, error?: { code: string }) {
  const sent: string[] = [];
  const client = {
    query: async (text: string) => {
      sent.push(text);
      if (sent.length === 1) return { rows: [{ userid: [], dbid: [], queryid: [], ...first }] };
      if (error) throw Object.assign(new Error('refused'), error);
      return { rows: [keys] };
    },
  };
  return { client: client as unknown as pg.ClientBase, sent };
}

const keys = { userid: [10], dbid: [5], toplevel: [true], queryid: ['42'], hidden: false };

describe('readHeldQueryKeys', () => {
  it("reads the keys without texts, from the extension's own schema, and the running statements' keys", async () => {
    const { client, sent } = node({ max: '100', schema: 'ext', userid: [11], dbid: [5], queryid: ['7'] }, keys);
    expect(await readHeldQueryKeys(client)).toEqual({
      max: 100,
      pgss: { userid: [10], dbid: [5], toplevel: [true], queryid: ['42'] },
      running: { userid: [11], dbid: [5], queryid: ['7'] },
    });
    expect(sent[1]).toMatch(/FROM ext\.pg_stat_statements\(false\)/);
  });

  it('knows no held set where it cannot read all of it: not installed, query ids hidden, not readable', async () => {
    expect((await readHeldQueryKeys(node({ max: null, schema: null }).client)).pgss).toBeNull();
    expect((await readHeldQueryKeys(node({ max: null, schema: null }).client)).max).toBe(5000);
    expect((await readHeldQueryKeys(node({ max: '5000', schema: 'public' }, { ...keys, hidden: true }).client)).pgss).toBeNull();
    expect((await readHeldQueryKeys(node({ max: '5000', schema: 'public' }, undefined, { code: '55000' }).client)).pgss).toBeNull();
    await expect(readHeldQueryKeys(node({ max: '5000', schema: 'public' }, undefined, { code: '57P01' }).client)).rejects.toThrow(
      'refused',
    );
  });
});

describe('unheldBounds', () => {
  it('keeps M/4 unheld keys per role and M/2 per node beside the held ones, M and 2M when none is known held', () => {
    const running = { userid: [], dbid: [], queryid: [] };
    expect(unheldBounds({ max: 5000, pgss: { userid: [], dbid: [], toplevel: [], queryid: [] }, running })).toEqual({
      perRole: 1250,
      perNode: 2500,
    });
    expect(unheldBounds({ max: 5000, pgss: null, running })).toEqual({ perRole: 5000, perNode: 10000 });
  });
});
