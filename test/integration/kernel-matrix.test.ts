import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/package-root.js';

/*
 * The kernel matrix (docs/kernel-matrix.md): the npm package as shipped, on the kernels our users
 * run rather than this machine's. For each of Debian's cloud kernels (6.1 and 6.12 of Debian 12,
 * 6.19 of Debian 13's backports, 5.10 of Debian 11) a QEMU guest under TCG boots with a Debian 12
 * root holding PostgreSQL 15 as its initramfs and the packed package installed as npm installs
 * it (scripts/kernel-matrix/). Inside, the package's own commands run: `check`, then `run` with
 * the default sets and the query set, against a workload. Ground truth as on a bare host
 * (test/integration/pack.test.ts, containers.test.ts, with their tolerances): the CPU-bound
 * backend's on-CPU time against the guest kernel's scheduler (/proc/<pid>/schedstat), calls
 * against pg_stat_statements. 5.10 lacks what the cpu set needs (bpf_get_current_task_btf, 5.11):
 * there `check` names what is missing per set and `run` refuses in one line, exit 2.
 *
 * KERNEL_MATRIX=6.1,6.19 runs only those kernels. The package is packed without its prepack
 * build (`npm test` has just built it; run `npm run build` first when running this file alone).
 */
const run = promisify(execFile);
const scripts = join(packageRoot(), 'scripts', 'kernel-matrix');
const BEGIN = '=====KERNEL-MATRIX-RESULT-BEGIN=====';
const END = '=====KERNEL-MATRIX-RESULT-END=====';
/** QEMU's hard limit per kernel; the test's own limit is a little above it. */
const GUEST_TIMEOUT_S = 300;
const CALLS = 300;

type Expectation = 'collects' | 'refuses cpu';
/** `attached`: the sets `run --probes query` attaches there (io needs block_io_start, 6.5). */
const KERNELS: { series: string; expect: Expectation; attached?: string }[] = [
  { series: '6.1', expect: 'collects', attached: 'cpu, memory, query' },
  { series: '6.12', expect: 'collects', attached: 'cpu, memory, io, query' },
  { series: '6.19', expect: 'collects', attached: 'cpu, memory, io, query' },
  { series: '5.10', expect: 'refuses cpu' },
];
const selected = process.env.KERNEL_MATRIX?.split(',').map((s) => s.trim());
const kernels = selected ? KERNELS.filter((k) => selected.includes(k.series)) : KERNELS;

interface Outcome {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}
/** What guest-run.mjs reports (raw figures; the assertions are here). */
interface GuestResult {
  kernel: string;
  node: string;
  bootS: number;
  phases: Record<string, number>;
  errors: string[];
  check?: Outcome;
  run?: { attached: boolean; code: number | null; signal: string | null; stderr: string };
  burn?: { pid: number; backendTruthMs: number; queryTruthMs: number; backendOursMs: number | null };
  pgbench?: { code: number | null; tps: number; stderr: string };
  statements?: { query: string; pgss_calls: number; total_exec_time: number; calls: number; on_cpu_ms: number; runq_wait_ms: number }[];
}

/** Seconds of this machine's clock (the guest's runs slow when QEMU is starved of CPU). */
interface Timing {
  series: string;
  fetch: number;
  boot: number;
  postgres: number;
  check: number;
  attach: number;
  workload: number;
  stopRead: number;
  total: number;
}
const timings: Timing[] = [];

let work: string;
let rootfs: string;
let guest: string;
let setupS = 0;

async function script(name: string, args: string[], timeout: number): Promise<string> {
  const { stdout } = await run('bash', [join(scripts, name), ...args], { timeout, maxBuffer: 1 << 24 });
  return stdout.trim().split('\n').at(-1)!;
}

/** Boots one kernel; the console's lines with the host time each arrived at, and the guest's result. */
async function boot(
  vmlinuz: string,
  series: string,
): Promise<{ lines: { at: number; text: string }[]; result: GuestResult | null; code: number | null }> {
  const results = join(work, `results-${series}`);
  const started = performance.now();
  const child = spawn('bash', [join(scripts, 'boot.sh'), vmlinuz, rootfs, guest, results, String(GUEST_TIMEOUT_S)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: { at: number; text: string }[] = [];
  let partial = '';
  const take = (chunk: Buffer) => {
    partial += chunk.toString('utf8');
    for (let i = partial.indexOf('\n'); i >= 0; i = partial.indexOf('\n')) {
      lines.push({ at: (performance.now() - started) / 1000, text: partial.slice(0, i).replace(/\r$/, '') });
      partial = partial.slice(i + 1);
    }
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  lines.push({ at: (performance.now() - started) / 1000, text: partial });
  const text = existsSync(results) ? readFileSync(results, 'utf8') : '';
  const begin = text.indexOf(BEGIN);
  const end = text.indexOf(END, begin);
  const result = begin >= 0 && end > begin ? (JSON.parse(text.slice(begin + BEGIN.length, end)) as GuestResult) : null;
  return { lines, result, code };
}

/** Host seconds at which the guest logged `guest-run: <phase> …` / `guest-run: <phase>: N s`. */
function phaseTimes(lines: { at: number; text: string }[], phase: string): { start: number; end: number } {
  const at = (re: RegExp) => lines.find((l) => re.test(l.text))?.at ?? Number.NaN;
  // Not anchored: a kernel message may share the console line.
  return { start: at(new RegExp(`guest-run: ${phase} …`)), end: at(new RegExp(`guest-run: ${phase}: \\d`)) };
}

beforeAll(async () => {
  const started = performance.now();
  for (const tool of ['qemu-system-x86_64', 'cpio']) {
    await run('sh', ['-c', `command -v ${tool}`]).catch(() => {
      throw new Error(`kernel matrix: ${tool} is not installed (bash scripts/bootstrap.sh installs it, as root)`);
    });
  }
  work = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-kernel-matrix-'));
  // The package as npm pack makes it, installed into the guest's /usr/local as npm install -g does.
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--pack-destination', work, '--loglevel=error'], {
    cwd: packageRoot(),
    maxBuffer: 1 << 26,
  });
  const tarball = join(work, stdout.trim().split('\n').at(-1)!);
  guest = await script('pack-guest.sh', [tarball, join(work, 'guest.cpio.gz')], 180_000);
  rootfs = await script('build-rootfs.sh', [], 300_000);
  setupS = (performance.now() - started) / 1000;
}, 480_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
  if (timings.length === 0) return;
  const f = (s: number) => (Number.isFinite(s) ? s.toFixed(1).padStart(8) : '       -');
  const rows = timings.map((t) =>
    [t.series.padEnd(6), f(t.fetch), f(t.boot), f(t.postgres), f(t.check), f(t.attach), f(t.workload), f(t.stopRead), f(t.total)].join(' '),
  );
  const total = setupS + timings.reduce((sum, t) => sum + t.total + t.fetch, 0);
  console.log(
    [
      `kernel matrix, seconds of this machine's clock (set-up: package and root ${setupS.toFixed(1)} s; matrix in all ${total.toFixed(1)} s):`,
      'kernel    fetch     boot postgres    check   attach workload stop+read  total',
      ...rows,
    ].join('\n'),
  );
});

describe.each(kernels)('Debian cloud kernel $series', ({ series, expect: expectation, attached }) => {
  it(
    expectation === 'collects'
      ? 'runs the shipped package: check exit 0, run collects, on-CPU time matches the scheduler and calls pg_stat_statements'
      : 'runs the shipped package: check names what the kernel lacks per set, run exits 2 in one line, never "internal error"',
    async () => {
      const fetchStarted = performance.now();
      const vmlinuz = await script('fetch-kernel.sh', [series], 240_000);
      const fetchS = (performance.now() - fetchStarted) / 1000;
      const { lines, result, code } = await boot(vmlinuz, series);
      const console = lines.map((l) => l.text).join('\n');
      const p = (name: string) => phaseTimes(lines, name);
      const total = lines.at(-1)!.at;
      timings.push({
        series,
        fetch: fetchS,
        boot: p('postgres').start,
        postgres: p('postgres').end - p('postgres').start,
        check: p('check').end - p('check').start,
        attach: p('attach').end - p('attach').start,
        workload: p('workload').end - p('workload').start,
        stopRead: p('read').end - p('stop').start,
        total,
      });

      expect(code, `QEMU ended with ${code} (124: the ${GUEST_TIMEOUT_S} s timeout); console:\n${console.slice(-4000)}`).toBe(0);
      expect(result, `no result from the guest; console:\n${console.slice(-4000)}`).not.toBeNull();
      const r = result!;
      expect(r.kernel.startsWith(series === '5.10' ? '5.10.' : `${series}.`), r.kernel).toBe(true);
      expect(r.errors, console.slice(-4000)).toEqual([]);
      const check = r.check!;
      expect(`${check.stdout}${check.stderr}`).not.toMatch(/internal error/);
      expect(r.run!.stderr).not.toMatch(/internal error/);

      if (expectation === 'collects') {
        expect(check.code, check.stdout + check.stderr).toBe(0);
        expect(check.stdout).toMatch(/^ok +bpf load /m);
        expect(check.stdout).toMatch(/^ok +probes cpu /m);
        expect(r.run!.attached, r.run!.stderr).toBe(true);
        expect(r.run!.code, r.run!.stderr).toBe(0);
        expect(/attached probe sets: ([^(]*) \(/.exec(r.run!.stderr)?.[1], r.run!.stderr).toBe(attached);

        // The CPU-bound backend: what the collector wrote against the scheduler's sum_exec_runtime
        // (pack.test.ts's tolerance), and its statement's on-CPU time (containers.test.ts's).
        const burn = r.burn!;
        expect(burn.backendOursMs, r.run!.stderr).not.toBeNull();
        expect(Math.abs(burn.backendOursMs! - burn.backendTruthMs)).toBeLessThanOrEqual(0.1 * burn.backendTruthMs + 20);
        const statement = (text: string) => r.statements!.find((s) => s.query.includes(text));
        const burnStatement = statement('generate_series($1, $2) g WHERE g % $3 = $4');
        expect(burnStatement, JSON.stringify(r.statements)).toBeDefined();
        expect(burnStatement!.calls).toBe(1);
        expect(burn.queryTruthMs).toBeGreaterThan(150);
        expect(burnStatement!.on_cpu_ms / burn.queryTruthMs).toBeGreaterThan(0.85);
        expect(burnStatement!.on_cpu_ms / burn.queryTruthMs).toBeLessThan(1.15);
        // On-CPU plus waiting for a CPU is the execution time PostgreSQL measured.
        const executed = (burnStatement!.on_cpu_ms + burnStatement!.runq_wait_ms) / burnStatement!.total_exec_time;
        expect(executed).toBeGreaterThan(0.85);
        expect(executed).toBeLessThan(1.15);

        // Calls exactly as pg_stat_statements counts them.
        expect(r.pgbench!.code, r.pgbench!.stderr).toBe(0);
        const calls = statement('AS exact_calls_in_a_vm');
        expect(calls, JSON.stringify(r.statements)).toBeDefined();
        const detail = `${JSON.stringify(r.statements)}\n${r.run!.stderr}`;
        expect(Number(calls!.pgss_calls), detail).toBe(CALLS);
        expect(Number(calls!.calls), detail).toBe(CALLS);
      } else {
        // `check` ends cleanly (2: run cannot work here) and says, per default set, what is missing.
        expect(check.code, check.stdout + check.stderr).toBe(2);
        expect(check.stdout).toMatch(/^ok +btf /m);
        const cpuLine = check.stdout.split('\n').find((l) => /^\S+ +probes cpu /.test(l));
        expect(cpuLine, check.stdout).toMatch(/^FAIL +probes cpu +\S/);
        expect(cpuLine).toMatch(/bpf_get_current_task_btf|helper 158|5\.11/);
        for (const set of ['memory', 'io']) {
          const line = check.stdout.split('\n').find((l) => new RegExp(`^\\S+ +probes ${set} `).test(l));
          expect(line, `${set}: ${check.stdout}`).toMatch(new RegExp(`^(ok|FAIL|no) +probes ${set} +\\S`));
        }
        // `run` refuses in one line, exit 2, before collecting anything.
        expect(r.run!.attached).toBe(false);
        expect(r.run!.code, r.run!.stderr).toBe(2);
        const problems = r.run!.stderr.split('\n').filter((l) => l.trim() !== '' && !/^\S+ INFO /.test(l));
        expect(problems, r.run!.stderr).toEqual([expect.stringMatching(/ERROR .*cpu/)]);
      }
    },
    (GUEST_TIMEOUT_S + 270) * 1000,
  );
});
