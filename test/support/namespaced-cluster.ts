import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chownSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { findPgBin } from '../../src/cluster/throwaway-cluster.js';

/*
 * PostgreSQL in a container, without a container engine: a postmaster in its own pid and
 * mount namespaces (unshare --pid --fork --mount --mount-proc), where its binaries and its data
 * directory are bind-mounted at paths that do not exist on the host (/srv/pginst, /srv/pgdata).
 * The namespace's pid 1 stays and reaps, like a container's init; the postmaster is started by
 * pg_ctl inside. Connections go over TCP on 127.0.0.1 (the network is shared), with a random password.
 */
export const INSIDE_BIN = '/srv/pginst/bin';
export const INSIDE_DATA = '/srv/pgdata/data';
/** pid 1 of the namespace: waits for any child, its own or reparented to it, for ever. */
const REAPER = ['import os, time', 'while True:', '    try: os.wait()', '    except ChildProcessError: time.sleep(0.2)'].join('\n');

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** NSpid of a host process: its pid at every level (host first). */
export function nsPidsOnHost(pid: number): number[] {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('NSpid:'))!;
  return line.slice(6).trim().split(/\s+/).map(Number);
}

/** The host pid of the process whose pid in its own (deeper) namespace is `nsPid`, among the children of `parent`. */
export function hostPidOf(nsPid: number, parent: number): number {
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== parent) continue;
      const levels = nsPidsOnHost(pid);
      if (levels.length > 1 && levels.at(-1) === nsPid) return pid;
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no child of ${parent} has pid ${nsPid} in its namespace`);
}

export class NamespacedCluster {
  private constructor(
    readonly baseDir: string,
    readonly port: number,
    private readonly init: ChildProcess,
    /** The namespace's pid 1 (the shell), as the host sees it. */
    readonly initHostPid: number,
    /** The superuser's password (random, per cluster): in-process clients only, children get it in PGPASSWORD. */
    private readonly password: string,
  ) {}

  /** The data directory as the host sees it. */
  get hostDataDir(): string {
    return join(this.baseDir, 'data');
  }

  static async start(settings: Record<string, string | number> = {}): Promise<NamespacedCluster> {
    const pgBin = findPgBin();
    const pgRoot = dirname(pgBin);
    const baseDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-ns-'));
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    chownSync(baseDir, uid, gid);
    const port = await freePort();
    // As ThrowawayCluster: TCP (the network is shared with every local user) needs a random
    // password, read by initdb from a file that lives only until it is done; the socket is in the
    // cluster's own directory.
    const password = randomBytes(24).toString('base64url');
    const pwfile = join(baseDir, 'pwfile');
    writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
    chownSync(pwfile, uid, gid);
    try {
      execFileSync(
        'runuser',
        [
          '-u',
          'postgres',
          '--',
          join(pgBin, 'initdb'),
          '-D',
          join(baseDir, 'data'),
          '-U',
          'postgres',
          '--auth-local=trust',
          '--auth-host=scram-sha-256',
          `--pwfile=${pwfile}`,
          '--no-sync',
          '-E',
          'UTF8',
          '--locale',
          'C',
        ],
        { stdio: 'ignore' },
      );
    } finally {
      rmSync(pwfile, { force: true });
    }
    const conf = {
      listen_addresses: "'127.0.0.1'",
      port,
      unix_socket_directories: "'/srv/pgdata'",
      shared_preload_libraries: "'pg_stat_statements'",
      compute_query_id: 'on',
      'pg_stat_statements.track': 'top',
      fsync: 'off',
      shared_buffers: "'128MB'",
      logging_collector: 'off',
      ...settings,
    };
    appendFileSync(
      join(baseDir, 'data', 'postgresql.conf'),
      `\n${Object.entries(conf)
        .map(([k, v]) => `${k} = ${v}`)
        .join('\n')}\n`,
    );
    const script = [
      'set -e',
      'mount -t tmpfs tmpfs /srv',
      'mkdir -p /srv/pginst /srv/pgdata',
      `mount --bind ${pgRoot} /srv/pginst`,
      `mount --bind ${baseDir} /srv/pgdata`,
      `runuser -u postgres -- ${INSIDE_BIN}/pg_ctl -D ${INSIDE_DATA} -l /srv/pgdata/server.log -w -t 60 start >/dev/null`,
      'echo started',
      // The container's init: stays until killed (SIGKILL of pid 1 ends every process in it),
      // and reaps what is left to it, as tini or dumb-init do: a postmaster killed there is
      // gone, not a zombie whose pid keeps its lock files taken.
      `exec python3 -c '${REAPER}'`,
    ].join('\n');
    const init = spawn('unshare', ['--pid', '--fork', '--mount', '--mount-proc', '--propagation', 'private', 'sh', '-c', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    init.stdout!.on('data', (c) => (out += c));
    init.stderr!.on('data', (c) => (out += c));
    const deadline = Date.now() + 60_000;
    while (!out.includes('started')) {
      if (init.exitCode !== null || Date.now() > deadline) throw new Error(`namespaced cluster did not start: ${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // unshare forks the namespace's pid 1: the child of the unshare process.
    const initHostPid = Number(readFileSync(`/proc/${init.pid}/task/${init.pid}/children`, 'utf8').trim().split(' ')[0]);
    return new NamespacedCluster(baseDir, port, init, initHostPid, password);
  }

  /** For clients in this process: over TCP on 127.0.0.1, with the password. */
  connectionString(database = 'postgres'): string {
    return `postgresql://postgres:${this.password}@127.0.0.1:${this.port}/${database}`;
  }

  /** For a child process (the collector): no password in its command line, which every local user can read; see childEnv(). */
  childConnectionString(database = 'postgres'): string {
    return `postgresql://postgres@127.0.0.1:${this.port}/${database}`;
  }

  /** The environment for a child process: the password in PGPASSWORD (readable by its owner and root only). */
  childEnv(): NodeJS.ProcessEnv {
    return { ...process.env, PGPASSWORD: this.password };
  }

  /** The postmaster's pid on the host (its pid inside is postmasterNsPid). */
  postmasterHostPid(): number {
    const pidInside = this.postmasterNsPid();
    const ours = readlinkSync(`/proc/${this.initHostPid}/ns/pid`);
    for (const entry of readdirSync('/proc')) {
      const pid = Number(entry);
      if (!Number.isInteger(pid)) continue;
      try {
        if (readlinkSync(`/proc/${pid}/ns/pid`) === ours && nsPidsOnHost(pid).at(-1) === pidInside) return pid;
      } catch {
        // gone meanwhile
      }
    }
    throw new Error('postmaster not found on the host');
  }

  /** The postmaster's pid inside its namespace (postmaster.pid, first line). */
  postmasterNsPid(): number {
    return Number(readFileSync(join(this.hostDataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  }

  /** A command line run inside the cluster's pid and mount namespaces (as a pod's sidecar would be). */
  inside(argv: string[]): string[] {
    return ['nsenter', '-t', String(this.postmasterHostPid()), '-p', '-m', '--', ...argv];
  }

  async stop(): Promise<void> {
    try {
      process.kill(this.initHostPid, 'SIGKILL');
    } catch {
      // already gone
    }
    await new Promise((r) => (this.init.exitCode !== null ? r(null) : this.init.once('exit', r)));
    rmSync(this.baseDir, { recursive: true, force: true });
  }
}
