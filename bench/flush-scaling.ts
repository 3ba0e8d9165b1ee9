/*
 * Flush scaling: does a flush cost what changed, or what exists?
 *
 * A throwaway cluster and the sidecar in this process (default sets, history on, flushes only
 * when the bench asks). It runs --statements distinct statements (distinct query ids: select
 * lists of 14 constants, each an int or a text, 2^14 shapes), so the queries map and query_stats
 * hold that many keys; then it times flushes after re-running all of them (everything changed);
 * after re-running only --few of them (the map still holding all the others), right after a
 * flush that wrote them all and one flush later; and a flush after nothing ran. Each figure is
 * the median of --repeat flushes, as Sidecar.flush() times them (reading the maps, preparing,
 * the statement round trip: what the collector waits for), with the median of each of those
 * phases (FlushStatus.phases).
 *
 * --periodic times the flushes the interval timer makes (lazy: history rows wait for their
 * interval unless 4,096 keys wait, and a flush with nothing to write sends nothing) instead of
 * explicit ones (bpf_stats.collect(), stop), which write everything pending.
 *
 * --memory-seconds S then runs the collector as installed (the bundled CLI, default sets,
 * --interval 1s) while the --statements run over and over for S seconds: its RSS at the end and
 * its peak, its CPU time meanwhile, and the keys its queries map held (health.map_fill). The
 * map holds at most 8,192 keys, 4,096 of them one role's (this bench runs as one role).
 *
 * --probes latency attaches the latency set as well: each statement then also has a latency
 * histogram, so the histograms map holds as many (up to its capacity) as the queries map.
 *
 * Run (root): node dist/bench/flush-scaling.js [--statements 10000] [--few 100] [--repeat 5] [--periodic] [--memory-seconds 20] [--probes latency]
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { parseProbeSets } from '../src/families/index.js';
import { Sidecar } from '../src/sidecar/sidecar.js';
import { runDistinctStatements, SHAPE_BITS } from './distinct-statements.js';
import { runBench } from './run-bench.js';
import { SidecarProcess } from './sidecar-process.js';
import { flushOrThrow, timedFlushes, type PhaseMedians } from './timed-flushes.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    statements: { type: 'string', default: '10000' },
    few: { type: 'string', default: '100' },
    repeat: { type: 'string', default: '5' },
    periodic: { type: 'boolean', default: false },
    'memory-seconds': { type: 'string', default: '0' },
    probes: { type: 'string' },
  },
});
const probeSets = values.probes === undefined ? [] : parseProbeSets(values.probes);
const statements = Number(values.statements);
const few = Number(values.few);
const repeat = Number(values.repeat);
const memorySeconds = Number(values['memory-seconds']);
if (statements > 2 ** SHAPE_BITS) throw new Error(`--statements at most ${2 ** SHAPE_BITS}`);

const runStatements = (client: pg.Client, count: number, offset = 0) => runDistinctStatements(client, count, statements, offset);

async function main(): Promise<void> {
  const cluster = await ThrowawayCluster.start();
  let sidecar: Sidecar | null = null;
  const client = new pg.Client(cluster.connectionString());
  try {
    await client.connect();
    await client.query('CREATE EXTENSION pg_stat_statements');
    await client.query(`SELECT pg_stat_statements_reset()`);
    sidecar = await Sidecar.start({
      connectionString: cluster.connectionString(),
      intervalMs: 3_600_000,
      maxQueries: 2 ** SHAPE_BITS,
      maxQueryKeysPerRole: 0,
      control: false,
      probeSets,
    });
    const s = sidecar;
    await s.flush();
    print(
      `flush-scaling: ${statements} distinct statements kept, ${few} of them changed, median of ${repeat} ${values.periodic ? 'periodic' : 'explicit'} flushes` +
        `${probeSets.length ? `, with ${probeSets.join(', ')}` : ''}`,
    );
    // The timer's flushes are lazy: history waits for its interval, and nothing to write sends nothing.
    const flush = () => flushOrThrow(s, values.periodic);

    // The first flush of all of them inserts every row; later ones update them.
    await runStatements(client, statements);
    const first = await flush();
    print(`first flush (${first.queries} new query rows): ${first.ms.toFixed(1)} ms`);
    const figures: Array<{ what: string; ms: number; rows: number; phases: PhaseMedians }> = [];
    const measure = async (what: string, work: () => Promise<void>) => {
      const { times, ms, last, phases } = await timedFlushes(repeat, work, flush);
      figures.push({ what, ms, rows: last.queries, phases });
      print(`${what}: median ${ms.toFixed(2)} ms (${times.map((t) => t.toFixed(1)).join(', ')}), ${last.queries} query rows`);
    };
    await measure(`all ${statements} changed`, () => runStatements(client, statements));
    // Keys quiet for 3 flushes leave the map: each timed flush comes soon after one that touched
    // them all, so the map holds every statement when only `few` of them changed. A flush reads
    // what changed since the last one and, once more, what changed before (a change racing that
    // read): right after everything changed, the next flush reads everything again.
    let offset = 0;
    await measure(`${few} changed of ${statements} in the map, right after all changed`, async () => {
      await runStatements(client, statements);
      await flush();
      await runStatements(client, few, offset);
      offset += few;
    });
    await measure(`${few} changed of ${statements} in the map`, async () => {
      await runStatements(client, statements);
      await flush();
      await runStatements(client, few, offset);
      offset += few;
      await flush();
      await runStatements(client, few, offset);
      offset += few;
    });
    await measure(`nothing changed, ${statements} in the map`, async () => {
      await runStatements(client, statements);
      await flush();
      await flush();
    });

    if (memorySeconds > 0) {
      await sidecar.stop();
      sidecar = null;
      await memory(cluster.connectionString(), client);
    }

    print();
    // Each phase's own median: they need not add up to the flush's.
    print('| flush | query rows written | median ms | reading the maps | building rows and statement | the statement |');
    print('| --- | ---: | ---: | ---: | ---: | ---: |');
    for (const { what, rows, ms, phases: p } of figures) {
      print(`| ${what} | ${rows} | ${ms.toFixed(2)} | ${p.readMs.toFixed(2)} | ${p.buildMs.toFixed(2)} | ${p.statementMs.toFixed(2)} |`);
    }
  } finally {
    await sidecar?.stop();
    await client.end().catch(() => undefined);
    await cluster.stop();
  }
}

/** The installed collector's memory and CPU while all the statements run again and again. */
async function memory(dsn: string, client: pg.Client): Promise<void> {
  const { sidecar } = await SidecarProcess.start({ dsn, probes: probeSets.length ? probeSets.join(',') : undefined });
  try {
    const { rounds, cpuMsPerS } = await sidecar.cpuUnderLoad(memorySeconds, () => runStatements(client, statements));
    // One more interval, so that the last round is flushed and health says what the map held.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const { rss, anon } = sidecar.memoryMb();
    const { rows } = await client.query<{ entries: number; quota: string }>(
      `SELECT (map_fill->'queries'->>'entries')::int AS entries, dropped->>'role_quota' AS quota FROM bpf_stats.health WHERE stopped_at IS NULL`,
    );
    print(
      `memory, the installed collector over ${memorySeconds} s (${rounds} rounds of the ${statements} statements): RSS ${rss.toFixed(1)} MB (peak ${sidecar.peakRssMb().toFixed(1)}, private ${anon.toFixed(1)}), CPU ${cpuMsPerS.toFixed(1)} ms/s, queries map ${rows[0]?.entries ?? '?'} keys, role_quota ${rows[0]?.quota ?? '?'}`,
    );
  } finally {
    await sidecar.stop();
  }
}

runBench(main);
