import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { histogramCapacity } from '../../src/collector/collector-object.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { latencyDisagreeing, normalizedStatement } from '../support/latency-observations.js';
import { runStatements, statementOfTerms } from '../support/run-statements.js';

/*
 * The histograms map holds the active histograms, not every statement ever seen: quiet ones are
 * evicted once written (src/flush/histogram-deltas.ts), so a map filled by statements that no
 * longer run heals, and eviction loses no observation. Ground truth: pg_stat_statements' calls
 * against the statement latency histogram's observations (one per execution, latency set).
 */
const CAPACITY = 48;

let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

const statement = (n: number) => statementOfTerms(n, '*');

const run = (sqls: string[], times = 1) => runStatements(cluster.connectionString(), sqls, times);

/** This collector's figures for the histograms map, as its last flush wrote them. */
async function health(): Promise<{ refused: number; entries: number; maxEntries: number; evicted: number }> {
  const { rows } = await admin.query(
    `SELECT (dropped ->> 'histograms_full')::int AS refused, map_fill -> 'histograms' AS fill
       FROM bpf_stats.health WHERE pid = $1 AND stopped_at IS NULL`,
    [process.pid],
  );
  expect(rows).toHaveLength(1);
  const { entries, max_entries: maxEntries, evicted } = rows[0].fill;
  return { refused: rows[0].refused ?? 0, entries, maxEntries, evicted: evicted ?? 0 };
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    probeSets: ['latency'],
    maxHistograms: CAPACITY,
  });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('the histograms map', () => {
  it('heals once full: quiet histograms leave it, new statements get theirs, and no observation is lost', async () => {
    // Twice the map's capacity of distinct statements: about half are refused.
    const first = Array.from({ length: 2 * CAPACITY }, (_, i) => statement(i + 1));
    await run(first, 2);
    await sidecar.flush();
    const full = await health();
    expect(full.maxEntries).toBe(CAPACITY);
    expect(full.refused).toBeGreaterThan(0);
    expect(full.entries).toBe(CAPACITY);
    // What the map held is written whole: those statements' observations equal their calls.
    const lost = new Set((await latencyDisagreeing(admin, first)).map((r) => r.query));
    expect(lost.size).toBeGreaterThan(0);
    expect(lost.size).toBeLessThan(first.length);

    // Under pressure (keys were refused) a histogram quiet for one written flush leaves.
    await sidecar.flush();
    await sidecar.flush();
    const healed = await health();
    expect(healed.evicted).toBeGreaterThanOrEqual(CAPACITY - 8);
    expect(healed.entries).toBeLessThan(CAPACITY / 4);

    // New statements are all counted, and so are the evicted ones when they come back (their
    // rows add up): each statement's observations equal its calls, whatever was evicted between.
    const second = Array.from({ length: CAPACITY / 2 }, (_, i) => statement(1000 + i));
    const back = first.filter((sql) => !lost.has(normalizedStatement(sql))).slice(0, 8);
    expect(back).toHaveLength(8);
    await run([...second, ...back], 3);
    await sidecar.flush();
    expect((await health()).refused).toBe(healed.refused);
    expect(await latencyDisagreeing(admin, [...second, ...back])).toEqual([]);
    for (let i = 0; i < 4; i++) await sidecar.flush();
    expect((await health()).evicted).toBeGreaterThan(healed.evicted);
    expect(await latencyDisagreeing(admin, [...second, ...back])).toEqual([]);
  });

  it('is sized by the CPUs: the whole of it fits 32 MiB of values, within 1,024 and 8,192 entries', () => {
    expect(histogramCapacity(2)).toBe(Math.floor((32 * 1024 * 1024) / (2064 * 2)));
    expect(histogramCapacity(64)).toBe(Math.max(1024, Math.floor((32 * 1024 * 1024) / (2064 * 64))));
    expect(histogramCapacity(1024)).toBe(1024);
  });
});
