import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';
import { runCli } from '../support/run-cli.js';

/*
 * A collector that logs in with a password never has it on its command line, which every local
 * user can read (ps, /proc/PID/cmdline): the password comes from --dsn-file, or from a password
 * file (PGPASSFILE) or PGPASSWORD in its environment (/proc/PID/environ is its owner's only).
 * Ground truth: the collector's own flushes in bpf_stats, and the kernel's view of its argv.
 */
const cli = cliPath();
// A space, a quote and an @: a key=value string must quote it as libpq does, a URI escape it.
const PASSWORD = `s3cr3t it's@pw-${process.pid}`;
let cluster: ThrowawayCluster;
let dir: string;

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-secrets-'));
  const admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query(`CREATE ROLE collector LOGIN SUPERUSER PASSWORD ${pg.escapeLiteral(PASSWORD)}`);
  await admin.end();
});
afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs the collector until its first flush is in bpf_stats; returns what ps and /proc showed of it, then stops it. */
async function collectorSeenFromOutside(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ cmdline: string; ps: string; flushes: number; code: number | null; log: string }> {
  const child: ChildProcess = spawn(process.execPath, [cli, 'run', '--interval', '200ms', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env,
  });
  let log = '';
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  try {
    const deadline = Date.now() + 60_000;
    while (!log.includes('collecting every')) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the collector did not start:\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const cmdline = readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    const ps = execFileSync('ps', ['-ww', '-o', 'args=', '-p', String(child.pid)], { encoding: 'utf8' });
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    let flushes = 0;
    try {
      for (let i = 0; i < 50 && flushes === 0; i++) {
        await new Promise((r) => setTimeout(r, 200));
        flushes = Number((await admin.query('SELECT count(*) AS n FROM bpf_stats.health WHERE last_flush_at IS NOT NULL')).rows[0].n);
      }
      // It logged in as the role whose password it was given.
      const { rows } = await admin.query<{ n: string }>(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE usename = 'collector' AND application_name LIKE 'pg-bpf-stats%'",
      );
      expect(Number(rows[0]!.n)).toBeGreaterThan(0);
    } finally {
      await admin.end();
    }
    child.kill('SIGTERM');
    return { cmdline, ps, flushes, code: await exited, log };
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

describe('the password off the command line', () => {
  it('--dsn-file: a key=value string with a quoted password, read from a private file', async () => {
    const file = join(dir, 'dsn');
    const quoted = PASSWORD.replace(/[\\']/g, (c) => `\\${c}`);
    writeFileSync(file, `host=127.0.0.1 port=${cluster.port} dbname=postgres user=collector password='${quoted}'\n`, { mode: 0o600 });
    const seen = await collectorSeenFromOutside(['--dsn-file', file], process.env);
    expect(seen.code, seen.log).toBe(0);
    expect(seen.flushes).toBeGreaterThan(0);
    expect(seen.cmdline).toContain(`--dsn-file ${file}`);
    for (const shown of [seen.cmdline, seen.ps, seen.log]) expect(shown).not.toContain('s3cr3t');
  });

  it('PGPASSFILE (or PGPASSWORD) in the environment, the DSN without a password', async () => {
    const passfile = join(dir, 'pgpass');
    const escaped = PASSWORD.replace(/[\\:]/g, (c) => `\\${c}`);
    writeFileSync(passfile, `127.0.0.1:${cluster.port}:*:collector:${escaped}\n`, { mode: 0o600 });
    const dsn = `postgresql://collector@127.0.0.1:${cluster.port}/postgres`;
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PG')));
    const viaFile = await collectorSeenFromOutside(['--dsn', dsn], { ...env, PGPASSFILE: passfile });
    expect(viaFile.code, viaFile.log).toBe(0);
    expect(viaFile.flushes).toBeGreaterThan(0);
    // pg's own lookup of a password file prints a deprecation warning; ours does not.
    expect(viaFile.log).not.toMatch(/DeprecationWarning/);
    const viaVariable = await collectorSeenFromOutside(['--dsn', dsn], { ...env, PGPASSWORD: PASSWORD });
    expect(viaVariable.code, viaVariable.log).toBe(0);
    for (const shown of [viaFile.cmdline, viaFile.ps, viaVariable.cmdline, viaVariable.ps]) expect(shown).not.toContain('s3cr3t');
  });
});

describe('a password on the command line', () => {
  it('is refused by every command, in one line that does not repeat it, exit 2, before any connection', async () => {
    const uri = `postgresql://collector:${encodeURIComponent(PASSWORD)}@127.0.0.1:${cluster.port}/postgres`;
    const keywords = `host=127.0.0.1 port=${cluster.port} user=collector password='${PASSWORD.replace(/'/g, "\\'")}'`;
    for (const [flag, args] of [
      ['--dsn', ['run', '--dsn', uri]],
      ['--dsn', ['check', '--dsn', keywords]],
      ['--dsn', ['migrate', '--dsn', uri]],
      ['--dsn', ['top', '--dsn', uri, '--iterations', '1']],
      ['--dsn', ['report', '--dsn', keywords]],
      ['--sink', ['run', '--sink', uri]],
    ] as const) {
      const outcome = await runCli([...args]);
      expect(outcome.code, `${args.join(' ')}: ${outcome.stderr}`).toBe(2);
      const lines = outcome.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        new RegExp(`${flag} holds a password, which every local user can read on the command line: use ${flag}-file`),
      );
      expect(outcome.stderr + outcome.stdout).not.toContain('s3cr3t');
    }
  });
});
