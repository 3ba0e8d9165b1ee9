/*
 * Sink benchmark: many nodes' collectors flushing into ONE database (run --sink).
 *
 * A throwaway cluster is the sink. Each simulated node is what a collector's flush path is: its
 * own writer connection naming the node (bpf_stats.node), MetricRows, and the real flush parts
 * (query_stats, query_texts, backend_stats, history, health) joined into one statement by the
 * real FlushWriter. Only the BPF maps are simulated: every interval each node's snapshot moves
 * every one of its --queries query keys (the worst case: every query ran in every interval) and
 * --backends backends. All nodes flush at once each interval, as collectors on separate hosts
 * whose clocks tick together would. Reported: per-flush time (p50, p95, max), the rows written
 * per second (cumulative upserts + history inserts), and intervals whose flushes did not all
 * finish within the interval. The first flush of each node (which also writes 1,000 texts) is
 * reported apart.
 *
 * Run: node dist/bench/sink-nodes.js [--nodes 20] [--queries 1000] [--backends 20]
 *        [--seconds 30] [--interval 1s] [--history on|off]
 */
import { parseArgs } from 'node:util';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { parseDuration } from '../src/cli/parse-duration.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import type { BackendSample, QuerySample } from '../src/collector/map-samples.js';
import { MapSnapshot } from '../src/collector/map-snapshot.js';
import { METRIC_COLUMNS, PROBE_SETS } from '../src/families/index.js';
import { FlushWriter } from '../src/flush/flush-writer.js';
import { HealthPart } from '../src/flush/health-part.js';
import { HistoryPart } from '../src/flush/history-part.js';
import { HistoryRetention } from '../src/retention/history-retention.js';
import { nodeConnectionOptions } from '../src/storage/node-name.js';
import { QueryTextsPart } from '../src/flush/query-texts-part.js';
import { BackendStatsPart } from '../src/flush/backend-stats-part.js';
import type { BpfStatsDatabase } from '../src/storage/database.js';
import { MetricRows } from '../src/flush/metric-rows.js';
import { migrateSchema } from '../src/storage/migrate-schema.js';
import { QueryIncrements } from '../src/storage/query-increments.js';
import { QueryStatsPart } from '../src/flush/query-stats-part.js';
import { runBench } from './run-bench.js';

const print = (line = '') => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    nodes: { type: 'string', default: '20' },
    queries: { type: 'string', default: '1000' },
    backends: { type: 'string', default: '20' },
    seconds: { type: 'string', default: '30' },
    interval: { type: 'string', default: '1s' },
    history: { type: 'string', default: 'on' },
  },
});
const nodes = Number(values.nodes);
const queries = Number(values.queries);
const backendCount = Number(values.backends);
const seconds = parseDuration(values.seconds, '--seconds', { bareUnit: 's' }) / 1000;
const intervalMs = parseDuration(values.interval, '--interval');
const history = values.history !== 'off';
const MEASURED = new Set(Object.keys(PROBE_SETS));
const FIELDS = METRIC_COLUMNS.length;

/** One simulated node: the collector's flush path with the BPF maps replaced by counters. */
class Node {
  private tick = 0n;
  private readonly started = process.hrtime.bigint();
  readonly writer: FlushWriter<BpfStatsDatabase>;
  readonly health: HealthPart;
  readonly texts = new QueryTextsPart();
  private readonly rows = new MetricRows(1, () => undefined);

  constructor(
    readonly name: string,
    readonly db: Kysely<BpfStatsDatabase>,
    increments: QueryIncrements,
  ) {
    this.health = new HealthPart(db, this.rows, {
      postmasterPid: 1,
      intervalMs,
      probeSets: () => ['cpu', 'query'],
      historyRetentionMs: history ? 3_600_000 : null,
    });
    this.writer = new FlushWriter(db, [
      new QueryStatsPart(db, this.rows, increments),
      this.texts,
      new BackendStatsPart(db, this.rows),
      ...(history ? [new HistoryPart(db, this.rows, increments)] : []),
      this.health,
    ]);
  }

  /** The next interval's snapshot: every query and backend moved. */
  snapshot(): MapSnapshot {
    this.tick++;
    const metrics = () => Array.from({ length: FIELDS }, (_, i) => this.tick * BigInt(1000 + i));
    const qs: QuerySample[] = Array.from({ length: queries }, (_, i) => ({
      userid: 10,
      dbid: 5,
      toplevel: true,
      queryid: BigInt(1_000_000 + i),
      metrics: metrics(),
      waitSlots: [],
      rawKey: Buffer.alloc(0),
    }));
    const bs: BackendSample[] = Array.from({ length: backendCount }, (_, i) => ({
      pid: 10_000 + i,
      key: 10_000 + i,
      metrics: metrics(),
      queryid: BigInt(1_000_000 + i),
      backendStartUs: 800_000_000_000_000n + BigInt(i),
      taskStartNs: this.started - 10_000_000_000n,
      exitedNs: 0n,
      retired: false,
      memoryCgroup: 0n,
      clientWaits: 0n,
      clientWaitNs: 0n,
      unclassedNs: 0n,
      waitSlots: [],
      userid: 10,
      dbid: 5,
      backendType: 1,
      identityKnown: true,
    }));
    return new MapSnapshot(bs, qs, true, [], {} as never, [], () => {
      throw new Error('no family maps in this bench');
    });
  }

  async flush(): Promise<{ ms: number; rows: number }> {
    const maps = this.snapshot();
    const started = performance.now();
    const prepared = this.rowsOf(maps);
    // The texts a node's pg_stat_statements would give, looked up for keys new to this run.
    await this.texts.load(prepared.queries, fakeStatements as unknown as pg.Client, print);
    await this.writer.write({ maps, measured: MEASURED, startedMs: started });
    const written = prepared.queries.length + prepared.backends.length;
    return { ms: performance.now() - started, rows: history ? 2 * written : written };
  }

  private rowsOf(maps: MapSnapshot) {
    return this.rows.prepare(maps, MEASURED);
  }
}

/** pg_stat_statements as a node would answer the text lookup: one text per key asked for. */
const fakeStatements = {
  query: async (_text: string, params: unknown[][]) => ({
    rows: (params[3] as string[]).map((queryid, i) => ({
      userid: (params[0] as number[])[i],
      dbid: (params[1] as number[])[i],
      toplevel: (params[2] as boolean[])[i],
      queryid,
      query: `SELECT col_${queryid} FROM some_table WHERE id = $1 AND other_column = $2`,
    })),
  }),
};

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start({ settings: { max_connections: Math.max(100, nodes + 20) } });
  const pools: pg.Pool[] = [];
  try {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await migrateSchema(admin, undefined, 'bench-setup');
    const fleet: Node[] = [];
    for (let n = 0; n < nodes; n++) {
      const name = `node-${String(n + 1).padStart(2, '0')}`;
      const pool = new pg.Pool({ connectionString: cluster.connectionString(), max: 1, options: nodeConnectionOptions(name) });
      pools.push(pool);
      const db = new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool }) });
      fleet.push(new Node(name, db, await QueryIncrements.resolve(db)));
    }
    if (history) await new HistoryRetention(3_600_000, 600_000).maintain(fleet[0]!.db);
    for (const node of fleet) await node.health.start();

    print(
      `sink bench: ${nodes} nodes x ${queries} queries + ${backendCount} backends every ${intervalMs} ms into one database, ${seconds} s, history ${history ? 'on' : 'off'}`,
    );
    // First flush: every row is an insert, and every text is written once.
    const first = await Promise.all(fleet.map((node) => node.flush()));
    print(`first flush (inserts + ${queries} texts per node): max ${Math.max(...first.map((f) => f.ms)).toFixed(0)} ms`);

    const times: number[] = [];
    let rows = 0;
    let late = 0;
    const began = performance.now();
    for (let i = 0; i < seconds * (1000 / intervalMs); i++) {
      const due = began + (i + 1) * intervalMs;
      const tickStart = performance.now();
      const results = await Promise.all(fleet.map((node) => node.flush()));
      const wall = performance.now() - tickStart;
      if (wall > intervalMs) late++;
      for (const r of results) {
        times.push(r.ms);
        rows += r.rows;
      }
      const wait = due - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
    const elapsed = (performance.now() - began) / 1000;
    times.sort((a, b) => a - b);
    const size = await admin.query<{ bytes: string }>(
      "SELECT sum(pg_total_relation_size(c.oid))::text AS bytes FROM pg_class c WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind = 'r'",
    );
    const count = await admin.query<{ n: string }>('SELECT count(DISTINCT node)::text AS n FROM bpf_stats.query_stats');
    print(
      `flushes: ${times.length}; flush time p50 ${quantile(times, 0.5).toFixed(0)} ms, p95 ${quantile(times, 0.95).toFixed(0)} ms, max ${times[times.length - 1]!.toFixed(0)} ms`,
    );
    print(
      `rows written: ${(rows / elapsed).toFixed(0)} rows/s (${(rows / elapsed / nodes).toFixed(0)} per node; cumulative upserts${history ? ' + history inserts' : ''})`,
    );
    print(`intervals whose flushes did not all finish within ${intervalMs} ms: ${late} of ${times.length / nodes}`);
    print(`nodes in query_stats: ${count.rows[0]!.n}; bpf_stats tables now ${(Number(size.rows[0]!.bytes) / 1048576).toFixed(0)} MiB`);
    await admin.end();
  } finally {
    for (const pool of pools) await pool.end().catch(() => undefined);
    await cluster.stop();
  }
}

runBench(main);
