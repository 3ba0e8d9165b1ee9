import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import type { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cpuTimeMs } from './cpu-time.js';
import { withSession } from './session.js';

export interface CpuBurnOutcome {
  code: number | null;
  stderr: string;
  /** The burning backend's on-CPU time as the scheduler kept it (ground truth). */
  truthMs: number;
  /** bpf_stats.backend_stats.on_cpu_ms of that backend, after the collector stopped. */
  oursMs: number | null;
  /** The collector process's command line once it attached (what node ran it with). */
  argv: string[];
}

/**
 * Runs `command... run --duration 3s` against `cluster`, burns CPU in one backend while it
 * collects, and reads back what the collector wrote for that backend next to the scheduler's
 * own figure. `command` is how the collector is started (a setpriv prefix, an installed bin);
 * `dsn` is the collector's connection (default: the cluster's superuser).
 */
export async function collectCpuBurn(
  cluster: ThrowawayCluster,
  command: string[],
  env: NodeJS.ProcessEnv = process.env,
  dsn: string = cluster.connectionString(),
): Promise<CpuBurnOutcome> {
  const [file, ...args] = command;
  const child = spawn(file!, [...args, 'run', '--dsn', dsn, '--duration', '3s', '--interval', '500ms'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env,
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const attached = await Promise.race([
    new Promise<boolean>((resolve) => {
      const poll = setInterval(() => {
        if (/attached probe sets: /.test(stderr)) resolve(true);
      }, 50);
      void exited.then(() => clearInterval(poll));
      child.stderr.on('data', () => /attached probe sets: /.test(stderr) && (clearInterval(poll), resolve(true)));
    }),
    exited.then(() => false),
  ]);
  if (!attached) return { code: await exited, stderr, truthMs: 0, oursMs: null, argv: [] };
  const argv = readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  return withSession(cluster.connectionString(), async (client: pg.Client, pid: number) => {
    await client.query('SELECT count(*) FROM generate_series(1, 3000000)');
    const truthMs = cpuTimeMs(pid);
    const code = await exited;
    const { rows } = await client.query('SELECT on_cpu_ms FROM bpf_stats.backend_stats WHERE pid = $1', [pid]);
    return { code, stderr, truthMs, oursMs: rows[0]?.on_cpu_ms ?? null, argv };
  });
}
