/*
 * Following the postmaster across restarts, under load: for each `pg_ctl restart` (fast and
 * immediate, alternating), how long after the new postmaster accepts connections the
 * collector's first flush is written (the gap a DBA sees in bpf_stats), and how long before
 * that acceptance the BPF filter already pointed at the new postmaster (so that no statement
 * of it runs unseen). Acceptance is observed by a client that tries to connect every 5 ms;
 * the flush and the retarget by the collector running in this process. At the end, the
 * collector's calls of the load's statement against the load's own count of statements that
 * returned (and those that failed in flight).
 *
 * Run: node dist/bench/restart-gap.js [--rounds 6] [--clients 8]
 * Needs root (BPF) and PostgreSQL's server binaries.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { procStat } from '../src/postmaster/proc-stat.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STATEMENT = 'SELECT $1::int AS restart_gap_load';

function summary(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return `median ${at(0.5).toFixed(0)} ms, max ${sorted[sorted.length - 1]!.toFixed(0)} ms (${values.length} restarts)`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { rounds: { type: 'string', default: '6' }, clients: { type: 'string', default: '8' } },
  });
  const rounds = Number(values.rounds);
  const clients = Number(values.clients);
  const cluster = await ThrowawayCluster.start();
  let sidecar: Sidecar | null = null;
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE EXTENSION pg_stat_statements');
    await admin.query(STATEMENT, [0]);
    const queryid = (await admin.query('SELECT queryid::text FROM pg_stat_statements WHERE query = $1', [STATEMENT])).rows[0]
      .queryid as string;
    await admin.end();
    sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 1000, probeSets: ['query'] });

    // The load: clients that run the statement back to back and reconnect on every failure.
    let stop = false;
    const counts = { ok: 0, failed: 0 };
    const load = Array.from({ length: clients }, async () => {
      while (!stop) {
        const client = new pg.Client(cluster.connectionString());
        client.on('error', () => undefined);
        try {
          await client.connect();
        } catch {
          await sleep(5);
          continue;
        }
        try {
          for (;;) {
            if (stop) break;
            await client.query(STATEMENT, [counts.ok]);
            counts.ok++;
          }
        } catch {
          counts.failed++;
        } finally {
          await client.end().catch(() => undefined);
        }
      }
    });

    const gaps: number[] = [];
    const ahead: number[] = [];
    await sleep(2000);
    for (let round = 0; round < rounds; round++) {
      const mode = round % 2 === 0 ? 'fast' : 'immediate';
      const followedBefore = sidecar.followed.length;
      const oldPid = Number(readFileSync(join(cluster.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      const restarting = cluster.exec('pg_ctl', [
        '-D',
        cluster.dataDir,
        '-l',
        join(cluster.baseDir, 'server.log'),
        '-m',
        mode,
        '-w',
        '-t',
        '60',
        'restart',
      ]);
      // Acceptance: the first connection that succeeds once the old postmaster is gone.
      while (procStat(oldPid) && procStat(oldPid)!.state !== 'Z') await sleep(1);
      let acceptedAt = 0;
      let acceptedWall = 0;
      while (!acceptedAt) {
        const probe = new pg.Client(cluster.connectionString());
        probe.on('error', () => undefined);
        try {
          await probe.connect();
          await probe.query('SELECT 1');
          acceptedAt = performance.now();
          acceptedWall = Date.now();
        } catch {
          // not yet
        } finally {
          await probe.end().catch(() => undefined);
        }
        if (!acceptedAt) await sleep(5);
      }
      await restarting;
      while (sidecar.followed.length === followedBefore) await sleep(2);
      let flushedAt = 0;
      while (!flushedAt) {
        const last = sidecar.lastFlush;
        if (last && !last.error && last.at.getTime() >= acceptedWall) flushedAt = last.at.getTime() + last.ms - acceptedWall + acceptedAt;
        else await sleep(2);
      }
      const followed = sidecar.followed[sidecar.followed.length - 1]!;
      gaps.push(flushedAt - acceptedAt);
      ahead.push(acceptedAt - followed.at);
      print(
        `${mode}: ${followed.adoptedByBpf ? 'adopted by BPF at its first fork' : 'found in /proc'}; user space caught up ${(acceptedAt - followed.at).toFixed(0)} ms before it accepted (${followed.gapMs.toFixed(0)} ms after the old one was gone); first flush ${(flushedAt - acceptedAt).toFixed(0)} ms after it accepted`,
      );
      await sleep(2000);
    }
    stop = true;
    await Promise.all(load);
    await sleep(2500);
    const check = new pg.Client(cluster.connectionString());
    await check.connect();
    const calls = Number(
      (await check.query('SELECT coalesce(sum(calls), 0)::int AS n FROM bpf_stats.query_stats WHERE queryid = $1', [queryid])).rows[0].n,
    );
    await check.end();
    print();
    print(`first flush after the new postmaster accepts connections: ${summary(gaps)}`);
    print(`user space caught up with the new postmaster before it accepted: ${summary(ahead)}`);
    print(`calls: collector ${calls}; the load's statements that returned ${counts.ok}, failed in flight ${counts.failed}`);
    print(calls >= counts.ok && calls <= counts.ok + counts.failed ? 'calls exact across the restarts' : 'CALLS DIFFER');
  } finally {
    await sidecar?.stop();
    await cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
