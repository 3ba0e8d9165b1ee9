import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';
import { KernelFeatures } from '../../src/collector/kernel-features.js';
import { switchProgram } from '../../src/collector/switch-program.js';

/*
 * One collector per server: a second `run` against the same postmaster, through another
 * database, refuses in one line naming the first, and creates nothing. Ground truth: the
 * first collector's own pid (the child we spawned), pg_namespace of the second database, and
 * bpftool's list of loaded programs.
 */
const cli = cliPath();
const run = promisify(execFile);
let cluster: ThrowawayCluster;

async function ourPrograms(): Promise<number> {
  const progs = JSON.parse((await run('bpftool', ['-j', 'prog', 'show'])).stdout) as Array<{ name?: string }>;
  return progs.filter((p) => p.name === switchProgram(KernelFeatures.host())).length;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  const admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE DATABASE other');
  await admin.end();
});

afterAll(async () => {
  await cluster?.stop();
});

describe('a second collector on the same server', () => {
  it('refuses in one line naming the first (its pid and database), exit 2, nothing created; the first goes on', async () => {
    const first = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    first.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<number | null>((resolve) => first.on('exit', (code) => resolve(code)));
    try {
      await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/attached probe sets: cpu/);
      const programs = await ourPrograms();

      let second: { code: number; stderr: string };
      try {
        await run(process.execPath, [cli, 'run', '--dsn', cluster.connectionString('other')], { timeout: 60_000 });
        second = { code: 0, stderr: '' };
      } catch (error) {
        second = error as { code: number; stderr: string };
      }
      expect(second.code).toBe(2);
      const lines = second.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        new RegExp(`^\\S+Z ERROR another collector already runs on this server: pid ${first.pid} on .*, database postgres`),
      );

      const other = new pg.Client(cluster.connectionString('other'));
      await other.connect();
      const schemas = await other.query("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'bpf_stats'");
      await other.end();
      expect(schemas.rows[0].n).toBe(0);
      // The refused one loaded nothing (and left nothing loaded).
      expect(await ourPrograms()).toBe(programs);
      expect(first.exitCode).toBeNull();
    } finally {
      first.kill('SIGTERM');
      expect(await exited).toBe(0);
    }

    // The lock went with the first collector's session: a new one starts (in the other database).
    const next = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString('other'), '--duration', '1s'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let nextErr = '';
    next.stderr.on('data', (chunk) => (nextErr += chunk));
    expect(await new Promise((resolve) => next.on('exit', resolve)), nextErr).toBe(0);
  });

  it('released by a crash: after kill -9 of the first, a second one starts', async () => {
    const first = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    first.stderr.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise((resolve) => first.on('exit', resolve));
    await expect.poll(() => stderr, { timeout: 30_000, interval: 100 }).toMatch(/attached probe sets: cpu/);
    first.kill('SIGKILL');
    await exited;
    const next = spawn(process.execPath, [cli, 'run', '--dsn', cluster.connectionString('other'), '--duration', '1s'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let nextErr = '';
    next.stderr.on('data', (chunk) => (nextErr += chunk));
    expect(await new Promise((resolve) => next.on('exit', resolve)), nextErr).toBe(0);
  });
});
