import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';

/*
 * An insert burst's LWLock waits against pg_wait_sampling's profile of the same backends over the
 * same run (Debian's postgresql-15-pg-wait-sampling, sampling every 10 ms): a sampled event's
 * time is about its samples × 10 ms. A sample finds a backend in the event from
 * pgstat_report_wait_start to _end: its sleep (wait_time_ms) and, once woken, its wait in the run
 * queue until it ran (runq_after_ms). Each LWLock event with at least 50 samples must be within
 * 0.6–1.5× of samples × period.
 */
const PERIOD_MS = 10;
let cluster: ThrowawayCluster;
let admin: pg.Client;
let sidecar: Sidecar;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({
    settings: { shared_preload_libraries: "'pg_stat_statements,pg_wait_sampling'", 'pg_wait_sampling.profile_period': PERIOD_MS },
  });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE EXTENSION pg_wait_sampling');
  await admin.query('CREATE TABLE burst (id bigserial PRIMARY KEY, pad text)');
  sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000 });
});

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
});

describe('an insert burst', () => {
  it("has the LWLock wait times pg_wait_sampling's profile samples, event by event", async () => {
    const script = join(cluster.baseDir, 'burst.sql');
    writeFileSync(script, "INSERT INTO burst (pad) SELECT repeat('x', 200) FROM generate_series(1, 20);\n", { mode: 0o644 });
    const since = (await admin.query<{ now: Date }>('SELECT now()')).rows[0]!.now;
    await admin.query('SELECT pg_wait_sampling_reset_profile()');
    await cluster.exec('pgbench', ['-n', '-c', '8', '-j', '2', '-T', '10', '-f', script, cluster.connectionString()]);
    await sidecar.flush();
    // The burst's backends: the client backends that started with it, as bpf_stats knows them.
    const { rows: ours } = await admin.query(
      `SELECT w.wait_event, sum(w.wait_time_ms + w.runq_after_ms) AS ms, array_agg(DISTINCT w.pid) AS pids
         FROM bpf_stats.backend_wait_events w
        WHERE w.backend_type = 'client backend' AND w.backend_start >= $1 AND w.wait_event_type = 'LWLock'
        GROUP BY w.wait_event`,
      [since],
    );
    const pids = [...new Set(ours.flatMap((r) => r.pids as number[]))];
    expect(pids).toHaveLength(8);
    const { rows: sampled } = await admin.query(
      `SELECT event, sum(count)::int AS samples FROM pg_wait_sampling_profile
        WHERE event_type = 'LWLock' AND pid = ANY($1) GROUP BY event`,
      [pids],
    );
    const mine = new Map(ours.map((r) => [r.wait_event as string, Number(r.ms)]));
    const compared = sampled.filter((s) => s.samples >= 50);
    expect(compared.length, JSON.stringify({ ours, sampled })).toBeGreaterThan(0);
    for (const s of compared) {
      const ratio = (mine.get(s.event) ?? 0) / (s.samples * PERIOD_MS);
      expect(ratio, `${s.event}: ${JSON.stringify({ ours, sampled })}`).toBeGreaterThan(0.6);
      expect(ratio, `${s.event}: ${JSON.stringify({ ours, sampled })}`).toBeLessThan(1.5);
    }
  });
});
