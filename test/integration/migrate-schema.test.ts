import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { migrateSchema } from '../../src/storage/migrate-schema.js';

/*
 * migrations/ and sql/ (views, functions, grants, comments) are applied again only when they
 * may differ from what the schema holds. A view that CREATE OR REPLACE rewrote has a new row version in
 * pg_rewrite: its xmin says whether a migrateSchema applied sql/.
 */
let cluster: ThrowawayCluster;
let client: pg.Client;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  client = new pg.Client(cluster.connectionString());
  await client.connect();
  await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
});

afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

/** The transaction that last wrote bpf_stats.activity's rule (CREATE OR REPLACE VIEW writes it). */
async function viewWrittenBy(): Promise<string> {
  const { rows } = await client.query<{ xmin: string }>("SELECT xmin::text FROM pg_rewrite WHERE ev_class = 'bpf_stats.activity'::regclass");
  return rows[0]!.xmin;
}

async function schemaComment(): Promise<string> {
  const { rows } = await client.query<{ comment: string }>("SELECT obj_description('bpf_stats'::regnamespace, 'pg_namespace') AS comment");
  return rows[0]!.comment;
}

describe('migrateSchema', () => {
  it('applies migrations/ and sql/ again only when what they would write differs, or when asked to', async () => {
    await migrateSchema(client);
    const first = await viewWrittenBy();
    expect(await schemaComment()).toMatch(/^pg-bpf-stats: .* Definitions applied: [0-9a-f]{16}$/);

    // A restart of the same version: nothing to apply, and node-pg-migrate is not even asked
    // (it says "No migrations to run!" whenever it runs).
    const said: string[] = [];
    await migrateSchema(client, (line) => said.push(line));
    expect(await viewWrittenBy()).toBe(first);
    expect(said).toEqual([]);

    // An older version's start rewrites the schema's comment with its own sql/, without the mark.
    await client.query("COMMENT ON SCHEMA bpf_stats IS 'pg-bpf-stats: an older version'");
    await migrateSchema(client);
    const second = await viewWrittenBy();
    expect(second).not.toBe(first);
    expect(await schemaComment()).toMatch(/ Definitions applied: [0-9a-f]{16}$/);

    // pg-bpf-stats migrate applies everything, whatever the mark says.
    await migrateSchema(client, (line) => said.push(line), undefined, { reapply: true });
    expect(await viewWrittenBy()).not.toBe(second);
    expect(said).toContain('No migrations to run!');
  });

  it('applies sql/ again for another role (it owns and grants what it creates)', async () => {
    await migrateSchema(client);
    const before = await viewWrittenBy();
    await client.query('CREATE ROLE collector_two SUPERUSER');
    try {
      await client.query('SET ROLE collector_two');
      await migrateSchema(client);
      expect(await viewWrittenBy()).not.toBe(before);
    } finally {
      await client.query('RESET ROLE');
    }
  });
});
