import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareWithPgss, createBurstTable, runBurst } from '../../bench/distinct-burst-workload.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { queryMapEntries } from '../../src/collector/query-capacity.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * One application role, many distinct statements (issue 38): the only role a typical
 * application has, running more distinct statements than half the old map (4,096), from
 * several sessions. Ground truth: pg_stat_statements, every key it holds for that role, calls
 * equal. No periodic flush during the burst, so nothing is evicted meanwhile: every key is held
 * at once, as in a burst faster than the flushes (the strictest case for the map's size and the
 * role's share).
 */
const PGSS_MAX = 8000;
const STATEMENTS = 6000;
const SESSIONS = 6;
const ROLE = 'one_app';

let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar | null = null;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ settings: { 'pg_stat_statements.max': PGSS_MAX } });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query(`CREATE ROLE ${ROLE} LOGIN`);
  await createBurstTable(admin, ROLE);
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('one role, as many distinct statements as pg_stat_statements keeps', () => {
  it('gets every key pg_stat_statements has, with its calls, and nothing refused', async () => {
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000, probeSets: ['query'] });
    await admin.query('SELECT pg_stat_statements_reset()');
    // Shorter IN-lists than the bench's (1-300): the same shapes, in seconds rather than a minute.
    await runBurst(cluster.connectionString().replace('postgres@', `${ROLE}@`), STATEMENTS, SESSIONS);
    await sidecar.flush();
    await sidecar.flush();
    const health = (
      await admin.query(`SELECT dropped, map_fill->'queries' AS queries FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`, [
        process.pid,
      ])
    ).rows[0];
    const result = await compareWithPgss(admin, ROLE);
    console.log(
      `${result.exact} of ${result.pgss} keys exact; dropped ${JSON.stringify(health.dropped)}; queries ${JSON.stringify(health.queries)}`,
    );
    // The map is sized from the setting, read before load.
    expect(health.queries.max_entries).toBe(queryMapEntries(PGSS_MAX));
    expect(health.queries.max_entries).toBeGreaterThan(STATEMENTS);
    expect(result.pgss).toBe(STATEMENTS);
    expect(result, JSON.stringify(result.examples)).toMatchObject({ exact: STATEMENTS, missing: 0, wrongCalls: 0 });
    // The refusal counters are what they were meant to be: zero on an honest workload.
    expect(Number(health.dropped.role_quota)).toBe(0);
    expect(Number(health.dropped.queries_full)).toBe(0);
    expect(Number(health.dropped.map_no_memory)).toBe(0);
    expect(Number(health.dropped.calls_unattributed)).toBe(0);
  });
});
