import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';
import { ElfFile } from '../../src/postmaster/elf-file.js';
import { postgresWithoutUsdt } from '../support/postgres-without-usdt.js';
import { KernelFeatures } from '../../src/collector/kernel-features.js';
import { switchProgram } from '../../src/collector/switch-program.js';

/* The built CLI as a user runs it: exit codes, one-line errors, clean detach. */
const cli = cliPath();
const run = promisify(execFile);

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function pgBpfStats(args: string[], prefix: string[] = [], nodeFlags: string[] = []): Promise<Outcome> {
  const [file, ...argv] = [...prefix, process.execPath, ...nodeFlags, cli, ...args];
  try {
    const { stdout, stderr } = await run(file!, argv, { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** Ids of BPF links whose program is one of the collector's. */
async function collectorLinks(): Promise<number[]> {
  const progs = JSON.parse((await run('bpftool', ['-j', 'prog', 'show'])).stdout) as Array<{ id: number; name?: string }>;
  const ours = new Set(progs.filter((p) => p.name === switchProgram(KernelFeatures.host()) || p.name === 'on_query_done').map((p) => p.id));
  const links = JSON.parse((await run('bpftool', ['-j', 'link', 'show'])).stdout) as Array<{ id: number; prog_id: number }>;
  return links.filter((l) => ours.has(l.prog_id)).map((l) => l.id);
}

let cluster: ThrowawayCluster;

beforeAll(async () => {
  expect(existsSync(cli), 'the CLI is built (npm run build)').toBe(true);
  cluster = await ThrowawayCluster.start();
});

afterAll(async () => {
  await cluster?.stop();
});

describe('pg-bpf-stats run', () => {
  it('collects until SIGTERM, pauses on SIGUSR1 and resumes on SIGUSR2, then exits 0 with every BPF link detached', async () => {
    const before = await collectorLinks();
    const child = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/attached probe sets: cpu/);
    expect((await collectorLinks()).filter((id) => !before.includes(id)).length).toBeGreaterThan(0);

    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    await client.query('SELECT count(*) FROM generate_series(1, 1000000)');
    await expect
      .poll(async () => (await client.query('SELECT count(*)::int AS n FROM bpf_stats.backend_stats WHERE on_cpu_ms > 0')).rows[0].n, {
        timeout: 10_000,
      })
      .toBeGreaterThan(0);
    await client.end();

    // SIGUSR1 pauses: every link goes; SIGUSR2 brings them back.
    child.kill('SIGUSR1');
    await expect.poll(() => stderr, { timeout: 10_000, interval: 100 }).toMatch(/paused: probe sets cpu/);
    expect((await collectorLinks()).filter((id) => !before.includes(id))).toEqual([]);
    child.kill('SIGUSR2');
    await expect.poll(() => stderr, { timeout: 10_000, interval: 100 }).toMatch(/resumed: probe sets cpu/);
    child.kill('SIGUSR2');
    await expect.poll(() => stderr, { timeout: 10_000, interval: 100 }).toMatch(/not paused: nothing to resume/);
    expect((await collectorLinks()).filter((id) => !before.includes(id)).length).toBeGreaterThan(0);

    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(stderr).toMatch(/SIGTERM: detaching/);
    expect((await collectorLinks()).filter((id) => !before.includes(id))).toEqual([]);
  });

  it('takes SIGUSR1 and SIGTERM sent while it starts (the probes attach before the schema is checked) and stops cleanly, exit 0', async () => {
    const before = await collectorLinks();
    const child = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk;
      // At once, from the attached line's own event: the start is not done yet.
      if (/attached probe sets: cpu/.test(stderr) && child.signalCode === null && !child.killed) {
        child.kill('SIGUSR1');
        child.kill('SIGTERM');
      }
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    expect(await exited, stderr).toBe(0);
    const lines = stderr.split('\n');
    const ready = lines.findIndex((l) => /collecting every 200 ms/.test(l));
    expect(ready, stderr).toBeGreaterThan(lines.findIndex((l) => /attached probe sets: cpu/.test(l)));
    // Done in order once started: the pause (its flush), then the stop (the last one).
    expect(
      lines.findIndex((l) => /paused: probe sets cpu/.test(l)),
      stderr,
    ).toBeGreaterThan(ready);
    // Said when it arrived, before the start was done.
    const said = lines.findIndex((l) => /SIGTERM during the start: stopping once it is done \(SIGTERM again stops at once\)/.test(l));
    expect(said, stderr).toBeGreaterThanOrEqual(0);
    expect(said, stderr).toBeLessThan(ready);
    expect(stderr).toMatch(/SIGTERM: detaching and writing the last figures/);
    expect(stderr).toMatch(/stopped; last flush wrote/);
    expect((await collectorLinks()).filter((id) => !before.includes(id))).toEqual([]);
    const client = new pg.Client(cluster.connectionString());
    await client.connect();
    try {
      const { rows } = await client.query('SELECT stop_reason FROM bpf_stats.health WHERE pid = $1', [child.pid]);
      expect(rows).toEqual([{ stop_reason: 'stopped (SIGTERM)' }]);
    } finally {
      await client.end();
    }
  });
});

describe('a database that goes away', () => {
  it('keeps what it had collected when the postmaster restarts, and goes on with the new one', async () => {
    const target = await ThrowawayCluster.start();
    try {
      const child = spawn(process.execPath, [cli, 'run', '--dsn', target.connectionString(), '--interval', '200ms'], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk) => (stderr += chunk));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      // Running, not only attached: this is a restart of a collector that started.
      await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/collecting every 200 ms/);

      const client = new pg.Client(target.connectionString());
      await client.connect();
      await client.query('SELECT count(*) FROM generate_series(1, 2000000) AS before_restart');
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await client.end();
      await target.restart();

      await expect.poll(() => stderr, { timeout: 10_000, interval: 100 }).toMatch(/following postmaster \d+/);
      const after = new pg.Client(target.connectionString());
      await after.connect();
      await expect
        .poll(async () => (await after.query('SELECT on_cpu_ms, exited_at FROM bpf_stats.backend_stats WHERE pid = $1', [pid])).rows, {
          timeout: 10_000,
        })
        .toEqual([{ on_cpu_ms: expect.any(Number), exited_at: expect.any(Date) }]);
      const { rows } = await after.query('SELECT on_cpu_ms FROM bpf_stats.backend_stats WHERE pid = $1', [pid]);
      await after.end();
      expect(rows[0].on_cpu_ms).toBeGreaterThan(20);
      expect(child.exitCode).toBeNull();
      child.kill('SIGTERM');
      expect(await exited, stderr).toBe(0);
    } finally {
      await target.stop();
    }
  });

  it('a restart while it starts (the probes attached, the schema not checked yet): one line and exit 2, or it follows; never a stack', async () => {
    const target = await ThrowawayCluster.start();
    try {
      // At the attached line itself, and a little later (into the first flush and what follows it).
      for (const delayMs of [0, 100]) {
        const child = spawn(process.execPath, [cli, 'run', '--dsn', target.connectionString(), '--interval', '200ms'], {
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        let restarted: Promise<void> | null = null;
        child.stderr.on('data', (chunk: Buffer) => {
          stderr += chunk;
          if (!restarted && /attached probe sets: cpu/.test(stderr))
            restarted = new Promise((r) => setTimeout(r, delayMs)).then(() => target.restart());
        });
        const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
        // Either it gave up (a start is all or nothing) or it went on with the new postmaster.
        const outcome = await new Promise<number | null | 'following' | 'neither within 20 s'>((resolve) => {
          const poll = setInterval(() => /following postmaster \d+/.test(stderr) && done('following'), 100);
          const timer = setTimeout(() => done('neither within 20 s'), 20_000);
          const done = (result: number | null | 'following' | 'neither within 20 s') => {
            clearInterval(poll);
            clearTimeout(timer);
            resolve(result);
          };
          void exited.then(done);
        });
        expect(outcome, stderr).not.toBe('neither within 20 s');
        if (outcome !== 'following') {
          expect(outcome, stderr).toBe(2);
          const errors = stderr.split('\n').filter((l) => / ERROR /.test(l));
          expect(errors, stderr).toHaveLength(1);
          expect(errors[0]).toMatch(/PostgreSQL|bpf_stats schema/);
        } else {
          child.kill('SIGTERM');
          expect(await exited, stderr).toBe(0);
        }
        expect(stderr).not.toMatch(/^\S+ ERROR\s+at |internal error/m);
        await restarted;
      }
    } finally {
      await target.stop();
    }
  });
});

describe('bad input: one line, exit code 2, nothing half-created', () => {
  const oneLineError = (outcome: Outcome, pattern: RegExp) => {
    expect(outcome.code).toBe(2);
    const lines = outcome.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    // Not a terminal: ISO timestamp and level (src/cli/logger.ts).
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z ERROR /);
    expect(lines[0]).toMatch(pattern);
  };

  it('a DSN nobody answers', async () => {
    oneLineError(
      await pgBpfStats(['run', '--dsn', 'postgresql://postgres@127.0.0.1:1/postgres']),
      /cannot connect to PostgreSQL at postgresql:\/\/postgres@127\.0\.0\.1:1\/postgres: .*ECONNREFUSED/,
    );
  });

  it('an unknown probe set', async () => {
    oneLineError(await pgBpfStats(['run', '--probes', 'cpu,bogus']), /unknown probe set bogus/);
  });

  it('a user without the capabilities: one line per missing capability', async () => {
    const outcome = await pgBpfStats(['run', '--dsn', cluster.connectionString()], ['runuser', '-u', 'nobody', '--']);
    expect(outcome.code).toBe(2);
    expect(
      outcome.stderr
        .trim()
        .split('\n')
        .map((l) => /ERROR pg-bpf-stats needs (CAP_\w+) \(/.exec(l)?.[1]),
    ).toEqual(['CAP_BPF', 'CAP_PERFMON', 'CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH']);
  });

  it('a process signalled too often to load (a sampling profiler): one line, no stack', async () => {
    // node's profiler signals the process every 100 µs, which the verifier cannot outlast.
    const profiles = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-cpu-prof-'));
    try {
      const outcome = await pgBpfStats(
        ['run', '--dsn', cluster.connectionString()],
        [],
        ['--cpu-prof', '--cpu-prof-interval', '100', '--cpu-prof-dir', profiles],
      );
      expect(outcome.code).toBe(2);
      expect(outcome.stderr).not.toMatch(/^\s+at /m);
      const errors = outcome.stderr
        .trim()
        .split('\n')
        .filter((l) => / ERROR /.test(l));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/loading the BPF programs was interrupted: the kernel verifier stops when a signal is pending/);
    } finally {
      rmSync(profiles, { recursive: true, force: true });
    }
  });

  it('a postmaster that is not on this host (another pid namespace)', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE DATABASE elsewhere');
    oneLineError(
      await pgBpfStats(['run', '--dsn', cluster.connectionString('elsewhere')], ['unshare', '--pid', '--fork', '--mount-proc']),
      /postmaster not found: backend pid \d+ of this connection is not a PostgreSQL process on this host/,
    );
    const client = new pg.Client(cluster.connectionString('elsewhere'));
    await client.connect();
    const schema = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = 'bpf_stats'");
    await client.end();
    await admin.end();
    expect(schema.rows, 'nothing created before the target was confirmed').toEqual([]);
  });
});

describe('a PostgreSQL build without USDT probes', () => {
  let plain: ThrowawayCluster;
  let build: ReturnType<typeof postgresWithoutUsdt>;

  beforeAll(async () => {
    build = postgresWithoutUsdt();
    expect(ElfFile.read(join(build.pgBin, 'postgres')).usdtNotes()).toEqual([]);
    plain = await ThrowawayCluster.start({ pgBin: build.pgBin });
  });

  afterAll(async () => {
    await plain?.stop();
    build?.remove();
  });

  it('runs the default set and counts calls exactly through a uretprobe instead of USDT', async () => {
    const child = spawn(process.execPath, [cli, 'run', '--dsn', plain.connectionString(), '--probes', 'query', '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/attached probe sets: cpu(, \w+)*, query/);

    const client = new pg.Client(plain.connectionString());
    await client.connect();
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await client.query('CREATE TABLE counters (id int PRIMARY KEY, n int)');
    await client.query('INSERT INTO counters VALUES (1, 0)');
    for (let i = 0; i < 25; i++) await client.query('UPDATE counters SET n = n + 1 WHERE id = 1');
    const calls = async () =>
      (
        await client.query(`SELECT s.calls AS pgss, q.calls AS ours FROM pg_stat_statements s
            JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
           WHERE s.query LIKE 'UPDATE counters SET n = n + $_ WHERE id = $_'`)
      ).rows[0];
    await expect.poll(calls, { timeout: 10_000 }).toEqual({ pgss: '25', ours: '25' });
    await client.end();
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('is reported by check, which still exits 0', async () => {
    const outcome = await pgBpfStats(['check', '--dsn', plain.connectionString()]);
    expect(outcome.code).toBe(0);
    expect(outcome.stdout).toMatch(/^ok\s+probes cpu\s/m);
    expect(outcome.stdout).toMatch(/^no\s+usdt\s+none \(built without --enable-dtrace\)/m);
    expect(outcome.stdout).toMatch(/^ok\s+probes query\s/m);
  });
});

describe('pg-bpf-stats check', () => {
  it('prints one line per family and says LLC is unsupported without a PMU, not zero', async () => {
    const outcome = await pgBpfStats(['check', '--dsn', cluster.connectionString()]);
    expect(outcome.code).toBe(0);
    expect(outcome.stdout).toMatch(/^ok\s+postmaster\s+pid \d+/m);
    expect(outcome.stdout).toMatch(/^ok\s+probes query\s/m);
    const pmu = await run('perf', ['stat', '-e', 'cache-misses', 'true']).then(
      (r) => !/not supported|<not counted>/.test(r.stderr),
      () => false,
    );
    expect(outcome.stdout).toMatch(pmu ? /^ok\s+llc\s/m : /^no\s+llc\s+unsupported: no hardware PMU/m);
  });

  /**
   * The CLI in a memory cgroup of its own with this limit, as a container or a unit with
   * MemoryMax= runs it (the cgroup removed after); `via`: a command it goes through first.
   */
  async function inMemoryCgroup(limitMb: number, args: string[], via: string[] = []): Promise<{ outcome: Outcome; cgroup: string }> {
    const cgroup = MemoryCgroup.create('limit', limitMb * 2 ** 20);
    try {
      const outcome = await pgBpfStats(args, ['sh', '-c', `echo $$ > ${cgroup.dir}/tasks && exec "$0" "$@"`, ...via]);
      return { outcome, cgroup: `/${basename(cgroup.dir)}` };
    } finally {
      cgroup.remove();
    }
  }

  it("says when its memory cgroup's limit leaves no room for the maps when full, and still exits 0; run says it once, and runs", async () => {
    const check = ['check', '--dsn', cluster.connectionString()];
    // The collector alone is ~100 MB with a full map: 120 MB leaves too little whatever the CPUs.
    const tight = await inMemoryCgroup(120, check);
    expect(tight.outcome.code).toBe(0);
    const below = new RegExp(
      `^no\\s+memory limit\\s+cgroup ${tight.cgroup} limit 120 MB is below the maps when full \\(~(\\d+) MB on \\d+ CPUs\\) and the collector \\(~100 MB\\): .*give it (\\d+) MB or more`,
      'm',
    );
    expect(tight.outcome.stdout).toMatch(below);
    const [, maps, needed] = below.exec(tight.outcome.stdout)!;
    expect(Number(needed)).toBeGreaterThanOrEqual(Number(maps) + 100);

    // run says it too, once, and runs.
    const running = await inMemoryCgroup(120, ['run', '--dsn', cluster.connectionString(), '--duration', '2s']);
    expect(running.outcome.code, running.outcome.stderr).toBe(0);
    expect(
      running.outcome.stderr.match(new RegExp(`memory limit: cgroup ${running.cgroup} limit 120 MB is below the maps when full`, 'g')),
    ).toHaveLength(1);

    const roomy = await inMemoryCgroup(4096, check);
    expect(roomy.outcome.code).toBe(0);
    expect(roomy.outcome.stdout).toMatch(
      new RegExp(`^ok\\s+memory limit\\s+cgroup ${roomy.cgroup} limit 4096 MB: room for the maps when full`, 'm'),
    );
  });

  it("reads a container's limit from inside it: its own cgroup namespace, the memory hierarchy mounted there", async () => {
    // As a container runtime starts it: in the cgroup, then a cgroup namespace rooted there and
    // the hierarchy mounted again in a mount namespace of its own, so its cgroup shows as `/`.
    const mountThenExec = `umount /sys/fs/cgroup/memory && mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory && exec "$0" "$@"`;
    const { outcome } = await inMemoryCgroup(
      120,
      ['check', '--dsn', cluster.connectionString()],
      ['unshare', '--cgroup', '--mount', 'sh', '-c', mountThenExec],
    );
    expect(outcome.code, outcome.stderr).toBe(0);
    expect(outcome.stdout).toMatch(/^no\s+memory limit\s+cgroup \/ limit 120 MB is below the maps when full/m);
  });
});
