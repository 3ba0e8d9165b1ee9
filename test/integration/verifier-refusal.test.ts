import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { nativeAddonPath } from '../../src/native/bpf-native.js';
import { cliPath } from '../../src/package-root.js';
import { cpuTimeMs } from '../support/cpu-time.js';
import { withSession } from '../support/session.js';

/*
 * A refusal by the real kernel verifier, through the real loader, of the real object. What
 * makes a program unverifiable is libbpf's bpf_program__set_attach_target (the binding's
 * setAttachTarget), applied by a module the test preloads into the CLI (`node --require`, no
 * hook in the product) just before each load: the
 * program is loaded against another tracepoint, sched_kthread_stop_ret(int ret), whose one
 * argument the verifier then holds the program's argument reads to. It refuses them, as it
 * refuses a program this kernel lacks something for; the collector cannot tell the two apart.
 */
const cli = cliPath();
const exec = promisify(execFile);
/** A tracepoint of one int argument: every tp_btf program of the object reads more, or a pointer. */
const ONE_INT_ARGUMENT = 'sched_kthread_stop_ret';

let cluster: ThrowawayCluster;
let dir: string;
let hook: string;

beforeAll(async () => {
  expect(existsSync(cli), 'the CLI is built (npm run build)').toBe(true);
  dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-refusal-'));
  hook = join(dir, 'retarget.cjs');
  // The addon the CLI will load (the same file: node's module cache makes it the same object).
  writeFileSync(
    hook,
    `const addon = require(${JSON.stringify(nativeAddonPath())});
const retarget = JSON.parse(process.env.RETARGET || '{}');
// The addon's methods are read-only: a subclass in its place (the CLI reads it at each open).
addon.BpfObject = class extends addon.BpfObject {
  load() {
    for (const p of this.programs()) if (p.autoload && retarget[p.name]) this.setAttachTarget(p.name, retarget[p.name]);
    return super.load();
  }
};
`,
  );
  cluster = await ThrowawayCluster.start();
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The CLI with `programs` loaded against a tracepoint that does not fit them. */
function refusing(programs: string[]): { args: string[]; env: NodeJS.ProcessEnv } {
  return {
    args: ['--require', hook, cli],
    env: { ...process.env, RETARGET: JSON.stringify(Object.fromEntries(programs.map((p) => [p, ONE_INT_ARGUMENT]))) },
  };
}

async function cliRefusing(programs: string[], args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const run = refusing(programs);
  try {
    const { stdout, stderr } = await exec(process.execPath, [...run.args, ...args], { env: run.env, timeout: 90_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const linux = release().replace(/[.+]/g, '\\$&');

describe('a program the kernel refuses', () => {
  it('leaves its set out of run in one line; the other default sets collect, and an opt-in set refused later fails its request with the same line', async () => {
    const run = refusing(['on_dirty_pause', 'on_sched_waking']);
    const child = spawn(process.execPath, [...run.args, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'], {
      env: run.env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const admin = new pg.Client(cluster.connectionString());
    try {
      await expect.poll(() => stderr, { timeout: 60_000, interval: 100 }).toMatch(/attached probe sets: /);
      // One line: the set, the program, the kernel release, the verifier's reason.
      const said = stderr.split('\n').filter((l) => /on_dirty_pause/.test(l));
      expect(said, stderr).toHaveLength(1);
      expect(said[0]).toMatch(
        new RegExp(
          `probe set io is not supported here, collecting without it: Linux ${linux} refuses program on_dirty_pause: invalid bpf_context access off=48 size=8$`,
        ),
      );
      expect(stderr).not.toMatch(/internal error|ERROR/);
      const attached = /attached probe sets: ([\w, ]+) \(/.exec(stderr)![1]!.split(', ');
      expect(attached).toEqual(expect.arrayContaining(['cpu', 'memory']));
      expect(attached).not.toContain('io');

      // The cpu set's figures reach bpf_stats: a CPU-bound statement's on-CPU time, as the scheduler counted it.
      await admin.connect();
      await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      const kernelMs = await withSession(cluster.connectionString(), async (c) => {
        const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        const before = cpuTimeMs(pid);
        await c.query('SELECT count(*) FROM generate_series(1, 4000000) g WHERE g % 7 = 3');
        return cpuTimeMs(pid) - before;
      });
      expect(kernelMs).toBeGreaterThan(100);
      const collected = async () =>
        (
          await admin.query(`SELECT q.on_cpu_ms FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
                              WHERE s.query LIKE 'SELECT count(*) FROM generate_series($1, $2) g WHERE g % $3 = $4'`)
        ).rows[0]?.on_cpu_ms ?? 0;
      await expect.poll(collected, { timeout: 10_000 }).toBeGreaterThan(kernelMs * 0.85);
      expect(await collected()).toBeLessThan(kernelMs * 1.15);

      // bpf_stats.capabilities says it where check would.
      const io = async () =>
        (await admin.query("SELECT available, reason FROM bpf_stats.capabilities WHERE kind = 'probe set' AND probe = 'io'")).rows[0];
      await expect.poll(io, { timeout: 10_000 }).toMatchObject({
        available: false,
        reason: expect.stringMatching(
          new RegExp(`^unsupported: Linux ${linux} refuses program on_dirty_pause: invalid bpf_context access`),
        ),
      });

      // An opt-in set, loaded (verified) at its first request: refused then, the request says why.
      const request = async () => Number((await admin.query("SELECT bpf_stats.collect('{blockers}', '10 s') AS id")).rows[0].id);
      const row = async (id: number) => (await admin.query('SELECT status, error FROM bpf_stats.collections WHERE id = $1', [id])).rows[0];
      const first = await request();
      await expect.poll(() => row(first), { timeout: 10_000 }).toMatchObject({ status: 'failed' });
      const refusal = `probe set blockers is not supported here: Linux ${linux} refuses program on_sched_waking: R\\d+ invalid mem access 'scalar'`;
      expect((await row(first)).error).toMatch(new RegExp(`^attach failed: ${refusal}$`));
      // Known from then on: the next request is rejected with it, without asking the verifier again.
      const second = await request();
      await expect.poll(() => row(second), { timeout: 10_000 }).toMatchObject({ status: 'rejected' });
      expect((await row(second)).error).toMatch(new RegExp(`^${refusal}$`));
      expect(stderr).not.toMatch(/internal error/);
    } finally {
      await admin.end().catch(() => undefined);
      child.kill('SIGTERM');
    }
    expect(await exited, stderr).toBe(0);
  });

  it('of the cpu set ends run in one line, exit 2, before anything is created', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    try {
      await admin.query('CREATE DATABASE refused');
      const outcome = await cliRefusing(['on_sched_switch'], ['run', '--dsn', cluster.connectionString('refused')]);
      expect(outcome.code, outcome.stderr).toBe(2);
      // One line for it (beside the INFO lines a start prints before it loads), no stack.
      expect(outcome.stderr).not.toMatch(/^\s+at |internal error/m);
      const lines = outcome.stderr
        .trim()
        .split('\n')
        .filter((l) => / ERROR /.test(l));
      expect(lines, outcome.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(
        new RegExp(
          `^\\S+ ERROR probe set cpu is not supported here: Linux ${linux} refuses program on_sched_switch: invalid bpf_context access off=\\d+ size=8$`,
        ),
      );
      const client = new pg.Client(cluster.connectionString('refused'));
      await client.connect();
      const schema = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = 'bpf_stats'");
      await client.end();
      expect(schema.rows).toEqual([]);
    } finally {
      await admin.end();
    }
  });

  it("is each set's verdict in check, with the oldest kernel it needs; check fails only for cpu", async () => {
    const io = await cliRefusing(['on_dirty_pause'], ['check', '--dsn', cluster.connectionString()]);
    expect(io.code, io.stdout + io.stderr).toBe(0);
    expect(io.stdout).toMatch(
      new RegExp(
        `^no\\s+probes io\\s+unsupported: Linux ${linux} refuses program on_dirty_pause: invalid bpf_context access off=48 size=8 \\(needs Linux 6\\.5\\+: `,
        'm',
      ),
    );
    expect(io.stdout).toMatch(/^ok\s+probes cpu\s+loads; default: .*; needs Linux 5\.12\+: /m);
    expect(io.stdout).toMatch(/^ok\s+probes memory\s+loads; /m);
    expect(io.stdout).toMatch(/^ok\s+bpf load\s+.*but for probe sets io \(below\)$/m);

    const cpu = await cliRefusing(['on_sched_switch'], ['check', '--dsn', cluster.connectionString()]);
    expect(cpu.code, cpu.stdout + cpu.stderr).toBe(2);
    expect(cpu.stdout).toMatch(new RegExp(`^FAIL\\s+probes cpu\\s+unsupported: Linux ${linux} refuses program on_sched_switch: `, 'm'));
    // The others still have their verdict.
    expect(cpu.stdout).toMatch(/^ok\s+probes io\s+loads; /m);
    expect(cpu.stderr).not.toMatch(/internal error/);
  });
});
