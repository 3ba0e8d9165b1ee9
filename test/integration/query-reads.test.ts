import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { mapFill } from '../support/map-fill.js';
import { runStatements, statementOfTerms } from '../support/run-statements.js';

/*
 * A flush reads the query keys that changed since the last one, not the whole map
 * (bpf/query-changes.bpf.h, src/collector/changed-key-reads.ts), and still writes every call
 * pg_stat_statements counts: when few of many statements ran, and when more changed than the
 * set of changed keys holds (then that flush reads the whole map).
 */
let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar | null = null;

const statement = statementOfTerms;

const run = (sqls: string[], times = 1) => runStatements(cluster.connectionString(), sqls, times);

/** Statements whose text starts with `prefix` (pg_stat_statements' normalized text) whose calls differ from query_stats'. */
async function disagreeing(prefix: string): Promise<Array<{ query: string; pgss: string; ours: string | null }>> {
  const { rows } = await admin.query(
    `SELECT s.query, s.calls::text AS pgss, q.calls::text AS ours
       FROM pg_stat_statements s
       LEFT JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
      WHERE s.query LIKE $1 AND s.calls IS DISTINCT FROM q.calls`,
    [`${prefix}%`],
  );
  return rows;
}

async function statementsLike(prefix: string): Promise<number> {
  const { rows } = await admin.query(`SELECT count(*)::int AS n FROM pg_stat_statements WHERE query LIKE $1`, [`${prefix}%`]);
  return rows[0].n;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('reading only the query keys that changed', () => {
  it('reads the few statements that ran among many held, and writes every call', async () => {
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['query'] });
    await sidecar.flush();
    const many = Array.from({ length: 60 }, (_, i) => statement(i + 1));
    await run(many);
    // Its time in phases (bench/flush-scaling.ts prints them): each measured, within the whole.
    const { ms, phases } = await sidecar.flush();
    expect(phases!.readMs).toBeGreaterThan(0);
    expect(phases!.statementMs).toBeGreaterThan(0);
    expect(phases!.readMs + phases!.statementMs).toBeLessThanOrEqual(ms);
    expect(await statementsLike('SELECT $1+$2')).toBe(60);
    expect(await disagreeing('SELECT $1+$2')).toEqual([]);

    // Two of them run again; a flush in between reads what the first one took once more.
    await sidecar.flush();
    await run([many[3]!, many[40]!], 2);
    await sidecar.flush();
    const changes = await mapFill(admin, 'query_changes');
    const queries = await mapFill(admin, 'queries');
    expect(queries.entries).toBeGreaterThanOrEqual(60);
    // The two, and the few statements this test ran to check (pg_stat_statements, health): not the 60.
    expect(changes.entries).toBeGreaterThanOrEqual(2);
    expect(changes.entries).toBeLessThan(10);
    expect(changes.overflowed ?? 0).toBe(0);
    expect(await disagreeing('SELECT $1+$2')).toEqual([]);
    await sidecar.stop();
    sidecar = null;
  });

  it('writes the calls of statements read by flushes that failed, at the first flush that succeeds', async () => {
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['query'] });
    await sidecar.flush();
    const some = Array.from({ length: 5 }, (_, i) => statement(i + 1, '-'));
    // Every row of query_stats now violates a constraint: each flush fails whole.
    await admin.query('ALTER TABLE bpf_stats.query_stats ADD CONSTRAINT refuse_all CHECK (queryid IS NULL) NOT VALID');
    try {
      await run(some.slice(0, 2));
      expect((await sidecar.flush()).error).toMatch(/refuse_all/);
      await run(some.slice(2));
      expect((await sidecar.flush()).error).toMatch(/refuse_all/);
      expect((await sidecar.flush()).error).toMatch(/refuse_all/);
    } finally {
      await admin.query('ALTER TABLE bpf_stats.query_stats DROP CONSTRAINT refuse_all');
    }
    expect((await sidecar.flush()).error).toBeNull();
    expect(await statementsLike('SELECT $1-$2')).toBe(5);
    expect(await disagreeing('SELECT $1-$2')).toEqual([]);
    await sidecar.stop();
    sidecar = null;
  });

  it('reads the whole map when more keys changed than query_changes holds, and loses no call', async () => {
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs: 3_600_000,
      probeSets: ['query'],
      maxQueryChanges: 4,
    });
    await sidecar.flush();
    const fresh = Array.from({ length: 12 }, (_, i) => statement(i + 1, '*'));
    await run(fresh);
    await sidecar.flush();
    expect((await mapFill(admin, 'query_changes')).overflowed).toBeGreaterThan(0);
    expect(await statementsLike('SELECT $1*$2')).toBe(12);
    expect(await disagreeing('SELECT $1*$2')).toEqual([]);
    // Healed: the next flushes read what changed again, and stay exact.
    await run([fresh[0]!, fresh[7]!], 3);
    await sidecar.flush();
    await sidecar.flush();
    expect(await disagreeing('SELECT $1*$2')).toEqual([]);
    const overflowed = (await mapFill(admin, 'query_changes')).overflowed;
    await run([fresh[2]!]);
    await sidecar.flush();
    expect((await mapFill(admin, 'query_changes')).overflowed).toBe(overflowed);
    expect(await disagreeing('SELECT $1*$2')).toEqual([]);
  });

  it("gives an explicit flush asked while another is writing what ran before it, not that flush's read", async () => {
    await sidecar?.stop();
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['query'] });
    await sidecar.flush();
    const text = statement(3, '/');
    await run([text]);
    // The first flush reads the maps (1 call), then its statement queues behind this lock.
    const blocker = new pg.Client(cluster.connectionString());
    await blocker.connect();
    let first: Promise<unknown> | null = null;
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE bpf_stats.query_stats IN EXCLUSIVE MODE');
      first = sidecar.flush();
      for (let waiting = 0; !waiting; ) {
        const { rows } = await admin.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'pg-bpf-stats writer' AND wait_event_type = 'Lock'",
        );
        waiting = rows[0].n;
      }
      await run([text], 4);
      const second = sidecar.flush();
      await blocker.query('COMMIT');
      expect(((await first) as { error: string | null }).error).toBeNull();
      expect((await second).error).toBeNull();
    } finally {
      await blocker.end();
      await first;
    }
    expect(await statementsLike('SELECT $1/$2')).toBe(1);
    expect(await disagreeing('SELECT $1/$2')).toEqual([]);
  });
});
