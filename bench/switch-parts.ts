/*
 * What the wait events add to on_sched_switch, part by part, timed inside the program
 * (bpf/part-timing.bpf.h, enum timed_part): the switch-out's wait-event accounting, and the wait
 * event's read for a task in IO sleep, which only the wait events need. switch-cost.ts compares whole
 * builds, and identical builds differ by ±200 ns between its rounds here; a part of tens of ns
 * needs its own clock (bpf/part-timing.bpf.h).
 *
 * The bench makes a timed copy of this package in a temporary directory: the package's files
 * (and a link to its node_modules), with the BPF object rebuilt with -DPART_TIMING (scripts/build-bpf-object.sh; the shipped object
 * has no timing). Each round runs that copy's collector (default sets) under pgbench, with
 * kernel.bpf_stats_enabled on, and reads the part's counters from the object's .bss (bpftool).
 *
 * Per round: the part's ns per run (its time less the empty region timed after it), how many of
 * on_sched_switch's runs reach it, and so its share of an average on_sched_switch run.
 *
 * With --ab, the copy's object is built with -DWAIT_EVENTS_AB instead (bpf/part-timing.bpf.h):
 * on_sched_switch leaves the wait-event accounting out in every other 8.4 ms and times its
 * whole run in each half. Per round: its ns per run with and without them, and the difference:
 * what they add to a switch, the pending work a part takes on from the code before it and the
 * code after them included, with no clock inside the accounting. --same-halves is its control:
 * both halves keep the wait events (-DWAIT_EVENTS_AB_SAME), so the difference is the method's own.
 *
 * Run (after npm run build, as root): node dist/bench/switch-parts.js [--rounds 5] [--seconds 6] [--builtin select-only|tpcb-like] [--ab [--same-halves]]
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { release, tmpdir } from 'node:os';
import { UserError } from '../src/errors.js';
import { packageRoot } from '../src/package-root.js';
import { listPrograms, readStatsEnabled, setStatsEnabled } from './bpf-stats.js';
import { LEAD_IN_SECONDS, LOAD_FLAGS, parseFlags, prepareCluster, roundSettings, runBenchmark } from './overhead-runs.js';
import { parseBuiltin, runLoad } from './pgbench.js';
import { bootstrapMedianInterval, median } from './report.js';
import { SidecarProcess } from './sidecar-process.js';
import { KernelFeatures } from '../src/collector/kernel-features.js';
import { switchProgram } from '../src/collector/switch-program.js';

const run = promisify(execFile);
const print = (line = '') => process.stdout.write(`${line}\n`);
const USAGE =
  'usage: node dist/bench/switch-parts.js [--rounds 5] [--seconds 6] [--clients 8] [--scale 10] [--builtin select-only|tpcb-like] [--ab [--same-halves]]';
/** The switch-out program this kernel runs (src/collector/switch-program.ts). */
const PROGRAM = switchProgram(KernelFeatures.host());
/** enum timed_part in bpf/part-timing.bpf.h, by index: what each part adds to a switch-out. */
const PARTS = [
  'wait-event accounting (record adds, map updates)',
  'wait-event read for a task in IO sleep',
  'of part 0: the backend_wait_events update',
  'of part 0: the query_wait_events update',
  "a query's wait slot (outside part 0, in the query's own update)",
] as const;

/** The part counters of bpf/part-timing.bpf.h, summed over CPUs by the atomic adds. */
interface PartCounters {
  runs: number;
  ns: number;
  emptyNs: number;
}

/** A copy of the package (its published files) with the BPF object built with `defines`; returns the copy's CLI. */
async function timedPackage(dir: string, defines: string[]): Promise<string> {
  const root = packageRoot();
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { files: string[]; bin: Record<string, string> };
  cpSync(join(root, 'package.json'), join(dir, 'package.json'));
  for (const entry of manifest.files) cpSync(join(root, entry), join(dir, entry), { recursive: true });
  // Its runtime dependencies (node-gyp-build), as an install would have them.
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  mkdirSync(join(dir, 'build', 'bpf'), { recursive: true });
  await run('bash', [
    join(root, 'scripts', 'build-bpf-object.sh'),
    'bpf/pgstats.bpf.c',
    join(dir, 'build', 'bpf', 'pgstats.bpf.o'),
    ...defines,
  ]);
  return join(dir, manifest.bin['pg-bpf-stats']!);
}

/** Ids of the BPF maps a process holds open (map_id in /proc/<pid>/fdinfo). */
function mapIds(pid: number): number[] {
  const ids: number[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fdinfo`)) {
    try {
      const id = /^map_id:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))?.[1];
      if (id !== undefined) ids.push(Number(id));
    } catch {
      // The fd was closed between the listing and the read.
    }
  }
  return ids;
}

/** The sidecar's .bss map id (libbpf names it "<object prefix>.bss"). */
async function bssMapId(sidecar: SidecarProcess): Promise<number> {
  for (const id of mapIds(sidecar.pid)) {
    const { stdout } = await run('bpftool', ['-j', 'map', 'show', 'id', String(id)]);
    if ((JSON.parse(stdout) as { name?: string }).name?.endsWith('.bss')) return id;
  }
  throw new Error(`the sidecar (pid ${sidecar.pid}) holds no .bss map`);
}

/** The .bss's arrays of `length` named `names`, from bpftool's BTF-formatted dump; `build` names the define they need. */
async function readArrays<Name extends string>(
  bssId: number,
  names: Name[],
  length: number,
  build: string,
): Promise<Record<Name, number[]>> {
  const { stdout } = await run('bpftool', ['-j', 'map', 'dump', 'id', String(bssId)], { maxBuffer: 16 * 1024 * 1024 });
  const [entry] = JSON.parse(stdout) as Array<{ formatted?: { value?: { '.bss'?: Array<Record<string, unknown>> } } }>;
  const variables = Object.assign({}, ...(entry?.formatted?.value?.['.bss'] ?? [])) as Record<string, number[] | undefined>;
  const arrays = {} as Record<Name, number[]>;
  for (const name of names) {
    const values = variables[name];
    if (!values || values.length !== length)
      throw new UserError(`the object's .bss has no ${name}[${length}]: not a ${build} build of this tree`);
    arrays[name] = values.map(Number);
  }
  return arrays;
}

/** Every part's counters (-DPART_TIMING). */
async function readParts(bssId: number): Promise<PartCounters[]> {
  const counters = await readArrays(bssId, ['part_runs', 'part_ns', 'part_empty_ns'], PARTS.length, '-DPART_TIMING');
  return PARTS.map((_, i) => ({ runs: counters.part_runs[i]!, ns: counters.part_ns[i]!, emptyNs: counters.part_empty_ns[i]! }));
}

/** on_sched_switch's runs and ns in each half (-DWAIT_EVENTS_AB): [with the wait events, without]. */
async function readHalves(bssId: number): Promise<Array<{ runs: number; ns: number }>> {
  const halves = await readArrays(bssId, ['ab_runs', 'ab_ns'], 2, '-DWAIT_EVENTS_AB');
  return [0, 1].map((i) => ({ runs: halves.ab_runs[i]!, ns: halves.ab_ns[i]! }));
}

interface Round {
  /** on_sched_switch runs, and its ns per run (timed build: the clock reads included). */
  switches: number;
  switchNs: number;
  /** Per part: its runs, and its own ns per run (-DPART_TIMING; empty with --ab). */
  parts: Array<{ runs: number; ns: number }>;
  /** With --ab: on_sched_switch's ns per run in the halves with and without the wait events. */
  withNs: number;
  withoutNs: number;
  transactions: number;
}

/** A part's ns per on_sched_switch run. */
const share = (r: Round, i: number) => (r.parts[i]!.ns * r.parts[i]!.runs) / r.switches;

runBenchmark('switch-parts', async (resources) => {
  const values = parseFlags(
    process.argv.slice(2),
    {
      rounds: { type: 'string', default: '5' },
      ...LOAD_FLAGS,
      seconds: { type: 'string', default: '6' },
      builtin: { type: 'string', default: 'select-only' },
      ab: { type: 'boolean', default: false },
      'same-halves': { type: 'boolean', default: false },
    },
    USAGE,
  );
  const builtin = parseBuiltin(values.builtin);
  const settings = roundSettings('switch-parts', values);
  const dir = mkdtempSync(join(tmpdir(), 'pgbpf-timed-'));
  try {
    const ab = values.ab;
    const sameHalves = values['same-halves'];
    if (sameHalves && !ab) throw new UserError(`--same-halves is the control of --ab\n${USAGE}`);
    const halves = sameHalves ? ['first half', 'second half (the same code)'] : ['with the wait events', 'without'];
    const cli = await timedPackage(
      dir,
      !ab ? ['-DPART_TIMING'] : sameHalves ? ['-DWAIT_EVENTS_AB', '-DWAIT_EVENTS_AB_SAME'] : ['-DWAIT_EVENTS_AB'],
    );
    print(
      `the wait events' ${ab ? `cost in ${PROGRAM}, A/B by 8.4 ms halves inside it${sameHalves ? ' (control: both halves with them)' : ''}` : `parts of ${PROGRAM}, timed inside it`}; ${settings.pairs} rounds × ${settings.seconds} s of pgbench -b ${builtin} ` +
        `-c ${settings.clients}, scale ${settings.scale}, ${settings.cores} cores, Linux ${release()}`,
    );
    const { cluster, version } = await prepareCluster(resources, settings, print);
    const pgbench = (seconds: number) => runLoad(cluster, builtin, settings.clients, seconds);
    const statsBefore = readStatsEnabled();
    const rounds: Round[] = [];
    for (let round = 1; round <= settings.pairs; round++) {
      const { sidecar } = await SidecarProcess.start({ dsn: cluster.connectionString(), probes: undefined, cli });
      try {
        await pgbench(LEAD_IN_SECONDS);
        await setStatsEnabled('1');
        const owned = sidecar.programIds();
        const program = async () => {
          const found = (await listPrograms()).filter((p) => p.name === PROGRAM && owned.has(p.id));
          if (found.length !== 1) throw new Error(`expected one ${PROGRAM} of the sidecar, found ${found.length}:\n${sidecar.log()}`);
          return found[0]!;
        };
        const bss = await bssMapId(sidecar);
        const [programBefore, partsBefore, halvesBefore] = [
          await program(),
          ab ? [] : await readParts(bss),
          ab ? await readHalves(bss) : [],
        ];
        const result = await pgbench(settings.seconds);
        const [programAfter, partsAfter, halvesAfter] = [await program(), ab ? [] : await readParts(bss), ab ? await readHalves(bss) : []];
        const switches = programAfter.runCnt - programBefore.runCnt;
        const halfNs = (i: number) => {
          const [before, after] = [halvesBefore[i]!, halvesAfter[i]!];
          return (after.ns - before.ns) / (after.runs - before.runs);
        };
        const r: Round = {
          switches,
          switchNs: (programAfter.runTimeNs - programBefore.runTimeNs) / switches,
          parts: partsAfter.map((after, i) => {
            const before = partsBefore[i]!;
            const runs = after.runs - before.runs;
            return { runs, ns: runs ? (after.ns - before.ns - (after.emptyNs - before.emptyNs)) / runs : 0 };
          }),
          withNs: ab ? halfNs(0) : 0,
          withoutNs: ab ? halfNs(1) : 0,
          transactions: result.transactions,
        };
        rounds.push(r);
        const detail = ab
          ? `${halves[0]} ${r.withNs.toFixed(1)} ns/run, ${halves[1]} ${r.withoutNs.toFixed(1)}: ${(r.withNs - r.withoutNs).toFixed(1)}`
          : r.parts
              .map(
                (p, i) =>
                  `part ${i}: ${p.ns.toFixed(1)} ns on ${((100 * p.runs) / r.switches).toFixed(1)}% of runs = ${share(r, i).toFixed(1)} ns/run`,
              )
              .join('; ');
        print(
          `round ${round}: ${PROGRAM} ${r.switchNs.toFixed(0)} ns/run (timed build), ${(r.switches / r.transactions).toFixed(2)} runs/txn; ${detail}`,
        );
      } finally {
        await setStatsEnabled(statsBefore);
        const code = await sidecar.stop();
        if (code !== 0) print(`sidecar exited with ${sidecar.exitDescription()} after SIGTERM`);
      }
    }
    const range = (values: number[], digits = 1) =>
      `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`;
    print();
    print(`${version}; median over ${rounds.length} rounds (min–max):`);
    if (ab) {
      const differences = rounds.map((r) => r.withNs - r.withoutNs);
      const interval = bootstrapMedianInterval(differences);
      print(
        `  ${PROGRAM} ${halves[0]}: ${range(rounds.map((r) => r.withNs))} ns per run; ${halves[1]}: ${range(rounds.map((r) => r.withoutNs))}`,
      );
      print(
        `  ${sameHalves ? "the halves' difference (the method's own)" : 'what the wait events add'}: ${range(differences)} ns per ${PROGRAM} run ` +
          `(median's 95% bootstrap interval ${interval.ratioMedianLow.toFixed(1)} to ${interval.ratioMedianHigh.toFixed(1)})`,
      );
      return;
    }
    for (const [i, name] of PARTS.entries()) {
      print(
        `  part ${i}, ${name}: ${range(rounds.map((r) => r.parts[i]!.ns))} ns per run of it, on ` +
          `${range(rounds.map((r) => (100 * r.parts[i]!.runs) / r.switches))}% of ${PROGRAM} runs: ${range(rounds.map((r) => share(r, i)))} ns per ${PROGRAM} run`,
      );
    }
    print(
      `  parts 0, 1 and 4 (what the wait events add): ${range(rounds.map((r) => share(r, 0) + share(r, 1) + share(r, 4)))} ns per ${PROGRAM} run`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
