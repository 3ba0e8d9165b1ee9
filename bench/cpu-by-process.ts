/*
 * Where the collector's cost lands: CPU per transaction of every process on the host, in the
 * on- and off-blocks of one long pgbench -S run (bench/overhead.ts's blocks method).
 *
 * overhead.ts says how much throughput the collector costs and what its own counters account
 * for (BPF run time, the sidecar's CPU). This bench finds the rest: at saturation every core is
 * busy either way, so a cost shows up as more CPU per transaction in some process, and the
 * processes are told apart (pgbench's backends, pgbench, the sidecar, its writer backend,
 * kernel threads, ...). Task CPU comes from /proc/<pid>/task/<tid>/schedstat (ns, exact).
 * Each block's first SWITCH_SECONDS (the switch) are left out, as in overhead.ts.
 *
 * Run: node dist/bench/cpu-by-process.js [--pairs 60] [--block 6] [--interval 1s] [--off none|links] [--clients 8] [--scale 10]
 * `--interval 30m` leaves the flush out of the measured seconds: the BPF links alone.
 * `--off links` compares within one run what two runs compared before (goal 3 of issue 16): the
 * off-blocks keep the probes attached and stop the collector's process (SIGSTOP), so on − off is
 * what the flushes cost, the collector's own CPU and whatever they cause elsewhere.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, release } from 'node:os';
import pg from 'pg';
import { UserError } from '../src/errors.js';
import { procStat } from '../src/postmaster/proc-stat.js';
import { benchSchedule, runAlternating, SWITCH_SECONDS } from './alternating-blocks.js';
import { LOAD_FLAGS, parseFlags, positiveInteger, prepareCluster, runBenchmark, type Resources } from './overhead-runs.js';
import { bootstrapMedianInterval, median, type BenchSettings } from './report.js';
import { SidecarProcess } from './sidecar-process.js';

const print = (line = '') => process.stdout.write(`${line}\n`);
const USAGE =
  'usage: node dist/bench/cpu-by-process.js [--pairs 60] [--block 6] [--interval 1s] [--off none|links] [--clients 8] [--scale 10]';
/** What an off-block leaves running: nothing of the collector, or its probes without its process. */
type OffBlocks = 'none' | 'links';
interface Task {
  ppid: number;
  comm: string;
  /** Every thread's on-CPU time. */
  cpuNs: number;
}

/** Every process on the host with its threads' on-CPU time so far. */
function processCpu(): Map<number, Task> {
  const tasks = new Map<number, Task>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = procStat(Number(entry));
      if (!stat) continue;
      let cpuNs = 0;
      for (const tid of readdirSync(`/proc/${entry}/task`)) {
        cpuNs += Number(readFileSync(`/proc/${entry}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      }
      tasks.set(Number(entry), { ppid: stat.ppid, comm: stat.comm, cpuNs });
    } catch {
      // Exited while we looked.
    }
  }
  return tasks;
}

interface Window {
  on: boolean;
  from: number;
  to: number;
  cpuNs: Map<string, number>;
}

async function benchmark(settings: BenchSettings & { interval: string; off: OffBlocks }, resources: Resources): Promise<void> {
  const offBlocks =
    settings.off === 'links' ? 'off-blocks: probes attached, the collector stopped (SIGSTOP)' : 'off-blocks: probes detached';
  print(
    `pg-bpf-stats CPU by process (blocks): ${settings.pairs} on-blocks × ${settings.blockSeconds} s, flush every ${settings.interval}, ${offBlocks}, pgbench -S -c ${settings.clients}, ${settings.cores} cores, Linux ${release()}`,
  );
  const { cluster } = await prepareCluster(resources, settings, print);
  const { sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, interval: settings.interval });
  const admin = new pg.Client({ connectionString: cluster.connectionString() });
  await admin.connect();
  const postmasterPid = procStat((await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid)!.ppid;
  const applications = new Map<number, string>();
  const nameBackends = async () => {
    const { rows } = await admin.query<{ pid: number; name: string }>(
      "SELECT pid, coalesce(nullif(application_name, ''), backend_type) AS name FROM pg_stat_activity",
    );
    for (const row of rows) applications.set(row.pid, row.name);
  };
  const group = (pid: number, task: Task): string => {
    if (pid === sidecar.pid) return 'sidecar (pg-bpf-stats run)';
    if (pid === postmasterPid) return 'postmaster';
    if (task.ppid === postmasterPid) {
      const name = applications.get(pid) ?? 'other';
      return name === 'pgbench' ? "pgbench's backends" : `postgres: ${name}`;
    }
    if (task.comm === 'pgbench') return 'pgbench';
    if (task.ppid === 2 || pid === 2) return `kernel: ${task.comm.replace(/[/:].*$/, '')}`;
    return `other: ${task.comm}`;
  };

  const windows: Window[] = [];
  let opened: { on: boolean; at: number; tasks: Map<number, Task> } | null = null;
  const close = () => {
    if (!opened) return;
    const now = processCpu();
    const cpuNs = new Map<string, number>();
    for (const [pid, task] of now) {
      const spent = task.cpuNs - (opened.tasks.get(pid)?.cpuNs ?? 0);
      const name = group(pid, task);
      if (spent > 0) cpuNs.set(name, (cpuNs.get(name) ?? 0) + spent);
    }
    windows.push({ on: opened.on, from: opened.at, to: Date.now() / 1000, cpuNs });
    opened = null;
  };
  try {
    const run = await runAlternating(
      cluster,
      benchSchedule(settings, async (on) => {
        close();
        if (settings.off === 'links') process.kill(sidecar.pid, on ? 'SIGCONT' : 'SIGSTOP');
        else sidecar.setCollecting(on);
        if (applications.size === 0) await nameBackends();
        setTimeout(() => (opened = { on, at: Date.now() / 1000, tasks: processCpu() }), SWITCH_SECONDS * 1000);
      }),
    );
    const transactionsIn = (w: Window) =>
      run.samples.filter((s) => s.at > w.from + 0.5 && s.at <= w.to + 0.5).reduce((sum, s) => sum + s.tps, 0);
    const totals = { on: { tx: 0, cpuNs: new Map<string, number>() }, off: { tx: 0, cpuNs: new Map<string, number>() } };
    for (const w of windows) {
      const side = w.on ? totals.on : totals.off;
      side.tx += transactionsIn(w);
      for (const [name, ns] of w.cpuNs) side.cpuNs.set(name, (side.cpuNs.get(name) ?? 0) + ns);
    }
    const perTxn = (side: typeof totals.on, name: string) => (side.cpuNs.get(name) ?? 0) / 1000 / side.tx;
    const names = [...new Set([...totals.on.cpuNs.keys(), ...totals.off.cpuNs.keys()])]
      .filter((n) => perTxn(totals.on, n) >= 0.01 || perTxn(totals.off, n) >= 0.01)
      .sort((a, b) => perTxn(totals.off, b) - perTxn(totals.off, a));
    const seconds = (on: boolean) => windows.filter((w) => w.on === on).reduce((sum, w) => sum + (w.to - w.from), 0);
    const tpsOff = totals.off.tx / seconds(false);
    const tpsOn = totals.on.tx / seconds(true);
    print();
    print(`TPS in the measured seconds: off ${tpsOff.toFixed(0)}, on ${tpsOn.toFixed(0)} (on/off ${(tpsOn / tpsOff).toFixed(3)})`);
    print(
      `CPU budget per transaction: off ${((settings.cores * 1e6) / tpsOff).toFixed(1)} µs, on ${((settings.cores * 1e6) / tpsOn).toFixed(1)} µs`,
    );
    print();
    print('| process | off µs/txn | on µs/txn | on − off |');
    print('| --- | --- | --- | --- |');
    let sumOff = 0;
    let sumOn = 0;
    for (const name of names) {
      const off = perTxn(totals.off, name);
      const on = perTxn(totals.on, name);
      sumOff += off;
      sumOn += on;
      print(`| ${name} | ${off.toFixed(3)} | ${on.toFixed(3)} | ${on - off >= 0 ? '+' : ''}${(on - off).toFixed(3)} |`);
    }
    print(
      `| all of the above | ${sumOff.toFixed(2)} | ${sumOn.toFixed(2)} | ${sumOn - sumOff >= 0 ? '+' : ''}${(sumOn - sumOff).toFixed(3)} |`,
    );
    // Each on-block against the mean of the off-blocks either side: how far the sums above can be trusted.
    const perBlock = (w: Window, name: string | null) =>
      [...w.cpuNs].filter(([n]) => name === null || n === name).reduce((sum, [, ns]) => sum + ns, 0) / 1000 / transactionsIn(w);
    for (const [label, name] of [
      ["pgbench's backends", "pgbench's backends"],
      ['every process', null],
    ] as const) {
      const diffs = windows.flatMap((w, i) => {
        const [before, after] = [windows[i - 1], windows[i + 1]];
        return w.on && before && after && !before.on && !after.on
          ? [perBlock(w, name) - (perBlock(before, name) + perBlock(after, name)) / 2]
          : [];
      });
      const { ratioMedianLow: low, ratioMedianHigh: high } = bootstrapMedianInterval(diffs);
      print(
        `${label}, on − off by block (${diffs.length} on-blocks against the off-blocks either side): median ${median(diffs).toFixed(3)} µs/txn, 95% interval of the median ${low.toFixed(3)} … ${high.toFixed(3)}`,
      );
    }
  } finally {
    await admin.end();
    if (settings.off === 'links') process.kill(sidecar.pid, 'SIGCONT');
    await sidecar.stop();
  }
}

function parseSettings(argv: string[]): BenchSettings & { interval: string; off: OffBlocks } {
  const values = parseFlags(
    argv,
    {
      pairs: { type: 'string', default: '60' },
      block: { type: 'string', default: '6' },
      interval: { type: 'string', default: '1s' },
      off: { type: 'string', default: 'none' },
      ...LOAD_FLAGS,
    } as const,
    USAGE,
  );
  if (values.off !== 'none' && values.off !== 'links') throw new UserError(`--off must be none or links, not ${values.off}`);
  const blockSeconds = positiveInteger(values.block, '--block');
  if (blockSeconds <= SWITCH_SECONDS) throw new UserError(`--block must be more than ${SWITCH_SECONDS} seconds`);
  return {
    label: 'cpu-by-process',
    probes: undefined,
    method: 'blocks',
    pairs: positiveInteger(values.pairs, '--pairs'),
    blockSeconds,
    seconds: positiveInteger(values.seconds, '--seconds'),
    clients: positiveInteger(values.clients, '--clients'),
    scale: positiveInteger(values.scale, '--scale'),
    cores: availableParallelism(),
    interval: values.interval,
    off: values.off,
  };
}

runBenchmark('cpu-by-process', (resources) => benchmark(parseSettings(process.argv.slice(2)), resources));
