/**
 * BPF cost of the histogram and LLC sets, in nanoseconds per program run, from the kernel's
 * own run-time statistics (bpf_enable_stats): stable on a shared machine where TPS is not.
 *
 *   node dist/bench/histogram-cost.js [--seconds 3] [--clients 4] [--rounds 5]
 *
 * One throwaway cluster, one collector object; for each configuration (cpu; cpu+latency;
 * cpu+sched; cpu+latency+sched; cpu+llc on a software event) a short pgbench -S load, and
 * the run_time_ns / run_cnt increase of each program of this object. This is a load
 * generator, not a throughput benchmark: TPS is printed only to give events per transaction.
 */
import { closeSync } from 'node:fs';
import pg from 'pg';
import { CollectorObject } from '../src/collector/collector-object.js';
import { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { familyRodata, PROBE_SETS, type ProbeSetName } from '../src/families/index.js';
import { loadNative } from '../src/native/bpf-native.js';
import { calibrateStatusLayout } from '../src/postmaster/calibrate-status-layout.js';
import { discoverPostmaster } from '../src/postmaster/discover-postmaster.js';
import { listPrograms, programDeltas, type ProgramStats } from './bpf-stats.js';
import { initPgbench, runSelectOnly } from './pgbench.js';
import { median } from './report.js';
import { SWITCH_PROGRAMS } from '../src/collector/switch-program.js';

const PROGRAMS: string[] = [...SWITCH_PROGRAMS, 'on_llc_reference', 'on_llc_miss'];
const PERF_TYPE_SOFTWARE = 1;
const PERF_COUNT_SW_PAGE_FAULTS = 2;
const PERF_COUNT_SW_CPU_CLOCK = 0;

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? Number(process.argv[at + 1]) : fallback;
}

async function main(): Promise<void> {
  const seconds = flag('seconds', 3);
  const clients = flag('clients', 4);
  const rounds = flag('rounds', 5);
  const cluster = await ThrowawayCluster.start();
  const stats = loadNative().bpfStatsEnable();
  let object: CollectorObject<ProbeSetName> | null = null;
  try {
    await initPgbench(cluster, 2);
    const control = new pg.Client(cluster.connectionString());
    const observer = new pg.Client(cluster.connectionString());
    await control.connect();
    await observer.connect();
    const target = await discoverPostmaster(control);
    const layout = await calibrateStatusLayout(target, control, observer);
    await observer.end();
    const before = new Set((await listPrograms()).map((p) => p.id));
    object = CollectorObject.load({
      target,
      layout,
      probeSets: PROBE_SETS,
      rodata: familyRodata(target),
      // The llc programs on software events (no PMU here): the cost of one program run is the
      // same whatever event fires it. cpu-clock every 100 us for references, every page fault for misses.
      perfEvents: {
        on_llc_reference: { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_CPU_CLOCK, samplePeriod: 100_000, label: 'cpu-clock' },
        on_llc_miss: { type: PERF_TYPE_SOFTWARE, config: PERF_COUNT_SW_PAGE_FAULTS, samplePeriod: 1, label: 'page-faults' },
      },
    });
    object.probes.attach('cpu');
    const mine = (await listPrograms()).filter((p) => !before.has(p.id) && PROGRAMS.includes(p.name)).map((p) => p.id);
    // Interleaved rounds, medians: the host's other load drifts over minutes, and each
    // configuration should see the same drift.
    const configs: ProbeSetName[][] = [[], ['latency'], ['sched'], ['latency', 'sched'], ['llc']];
    const samples = new Map<string, Array<{ perTxn: number; perRun: number; runsPerTxn: number }>>();
    for (let round = 0; round < rounds; round++) {
      for (const sets of configs) {
        for (const set of sets) object.probes.attach(set);
        const start: ProgramStats[] = (await listPrograms()).filter((p) => mine.includes(p.id));
        const result = await runSelectOnly(cluster, { clients, seconds });
        const end: ProgramStats[] = (await listPrograms()).filter((p) => mine.includes(p.id));
        for (const d of programDeltas(start, end)) {
          if (!d.runCnt) continue;
          const key = `cpu${sets.map((s) => `+${s}`).join('')} | ${d.name}`;
          const list = samples.get(key) ?? [];
          list.push({
            perTxn: d.runTimeNs / result.transactions,
            perRun: d.runTimeNs / d.runCnt,
            runsPerTxn: d.runCnt / result.transactions,
          });
          samples.set(key, list);
        }
        for (const set of sets) object.probes.detach(set);
      }
    }
    console.log(`${rounds} interleaved rounds of pgbench -S -c ${clients} for ${seconds} s per configuration; medians`);
    console.log('| sets | program | runs/txn | ns/run | BPF ns/txn |');
    console.log('| --- | --- | --- | --- | --- |');
    for (const [key, list] of samples) {
      console.log(
        `| ${key} | ${median(list.map((l) => l.runsPerTxn)).toFixed(2)} | ${median(list.map((l) => l.perRun)).toFixed(0)} | ${median(list.map((l) => l.perTxn)).toFixed(0)} |`,
      );
    }
    await control.end();
  } finally {
    object?.close();
    closeSync(stats);
    await cluster.stop();
  }
}

await main();
