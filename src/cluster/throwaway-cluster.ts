import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { UserError } from '../errors.js';

const run = promisify(execFile);

export interface ThrowawayClusterOptions {
  /** Directory with initdb, pg_ctl, postgres; default: $PG_BIN or the newest /usr/lib/postgresql/N/bin. */
  pgBin?: string;
  /** Extra postgresql.conf settings. */
  settings?: Record<string, string | number>;
  /** OS user that owns and runs the cluster when we are root (initdb refuses root). */
  osUser?: string;
}

/** Finds the system's PostgreSQL server binaries. */
export function findPgBin(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (!versions[0]) {
    throw new UserError('no PostgreSQL server binaries found: install postgresql or set PG_BIN');
  }
  return join(root, versions[0], 'bin');
}

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

export function osUserIds(name: string): { uid: number; gid: number } {
  const passwd = readFileSync('/etc/passwd', 'utf8');
  for (const line of passwd.split('\n')) {
    const [user, , uid, gid] = line.split(':');
    if (user === name) return { uid: Number(uid), gid: Number(gid) };
  }
  throw new UserError(`OS user ${name} does not exist (it owns the throwaway cluster); install postgresql`);
}

/**
 * A private PostgreSQL cluster in a temporary directory, started from the system's binaries,
 * listening on 127.0.0.1 at a free port, with pg_stat_statements preloaded. Used by the demo
 * and by the integration tests; stop() removes everything it created.
 *
 * No other local user can enter it (`trust` on 127.0.0.1 made every local user its superuser):
 *  - TCP (127.0.0.1, which every local user can reach) authenticates with SCRAM; the superuser's
 *    password is random, made for this cluster, and never on a command line (initdb reads it
 *    from a file, exec() hands it over in PGPASSWORD). tcpConnectionString() carries it.
 *  - The Unix socket is trusted, and lives in the cluster's 0700 directory: only the cluster's
 *    OS user (the one running us, or postgres when we are root) and root can reach it.
 *    connectionString() connects there, so any role a test creates can log in without a
 *    password (`.replace('postgres@', 'role@')`), as a local DBA's would.
 *
 * @example
 * const cluster = await ThrowawayCluster.start();
 * const client = new pg.Client(cluster.connectionString());
 * // ...
 * await cluster.stop();
 */
export class ThrowawayCluster {
  /** Clusters started and not stopped yet, for a program's signal handler to stop. */
  static readonly live = new Set<ThrowawayCluster>();

  private stopping: Promise<void> | null = null;

  private constructor(
    readonly pgBin: string,
    readonly baseDir: string,
    readonly dataDir: string,
    readonly port: number,
    private readonly asUser: string | null,
    /** The superuser's password (random, per cluster; a standby shares its primary's). */
    readonly password: string,
  ) {}

  static async start(options: ThrowawayClusterOptions = {}): Promise<ThrowawayCluster> {
    const pgBin = options.pgBin ?? findPgBin();
    const asUser = userInfo().uid === 0 ? (options.osUser ?? 'postgres') : null;
    const baseDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-'));
    // mkdtemp makes it 0700 already; said here because the socket's privacy depends on it.
    chmodSync(baseDir, 0o700);
    const dataDir = join(baseDir, 'data');
    if (asUser) {
      const { uid, gid } = osUserIds(asUser);
      chownSync(baseDir, uid, gid);
    }
    const port = await freePort();
    // URI-safe, so that connectionString() needs no escaping.
    const password = randomBytes(24).toString('base64url');
    const cluster = new ThrowawayCluster(pgBin, baseDir, dataDir, port, asUser, password);
    ThrowawayCluster.live.add(cluster);
    try {
      // initdb reads the password from a file (never argv); the file lives only until it is done.
      const pwfile = join(baseDir, 'pwfile');
      writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
      if (asUser) chownSync(pwfile, osUserIds(asUser).uid, osUserIds(asUser).gid);
      try {
        await cluster.exec('initdb', [
          '-D',
          dataDir,
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
        ]);
      } finally {
        rmSync(pwfile, { force: true });
      }
      const settings: Record<string, string | number> = {
        listen_addresses: "'127.0.0.1'",
        port,
        unix_socket_directories: `'${baseDir}'`,
        password_encryption: "'scram-sha-256'",
        shared_preload_libraries: "'pg_stat_statements'",
        compute_query_id: 'on',
        'pg_stat_statements.track': 'top',
        track_io_timing: 'on',
        fsync: 'off',
        max_connections: 100,
        shared_buffers: "'128MB'",
        logging_collector: 'off',
        ...options.settings,
      };
      const conf = Object.entries(settings)
        .map(([k, v]) => `${k} = ${v}`)
        .join('\n');
      appendFileSync(join(dataDir, 'postgresql.conf'), `\n# pg-bpf-stats throwaway cluster\n${conf}\n`);
      await cluster.exec('pg_ctl', ['-D', dataDir, '-l', join(baseDir, 'server.log'), '-w', '-t', '60', 'start']);
      return cluster;
    } catch (error) {
      await cluster.stop().catch(() => undefined);
      throw error;
    }
  }

  /**
   * A streaming hot standby of this cluster (pg_basebackup -R: it follows this one over
   * replication), in its own temporary directory and port, started and accepting read-only
   * connections. stop() it like any throwaway cluster.
   */
  async startStandby(): Promise<ThrowawayCluster> {
    const baseDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-standby-'));
    chmodSync(baseDir, 0o700);
    if (this.asUser) {
      const { uid, gid } = osUserIds(this.asUser);
      chownSync(baseDir, uid, gid);
    }
    const port = await freePort();
    const standby = new ThrowawayCluster(this.pgBin, baseDir, join(baseDir, 'data'), port, this.asUser, this.password);
    ThrowawayCluster.live.add(standby);
    try {
      // The password comes from PGPASSWORD (exec); -R writes it into primary_conninfo, in the
      // standby's 0700 data directory, for its WAL receiver.
      await standby.exec('pg_basebackup', [
        '-D',
        standby.dataDir,
        '-R',
        '-X',
        'stream',
        '-c',
        'fast',
        '-d',
        `postgresql://postgres@127.0.0.1:${this.port}/postgres`,
      ]);
      appendFileSync(
        join(standby.dataDir, 'postgresql.conf'),
        `\n# standby of ${this.port}\nport = ${port}\nunix_socket_directories = '${baseDir}'\nhot_standby = on\n`,
      );
      await standby.exec('pg_ctl', ['-D', standby.dataDir, '-l', join(baseDir, 'server.log'), '-w', '-t', '60', 'start']);
      return standby;
    } catch (error) {
      await standby.stop().catch(() => undefined);
      throw error;
    }
  }

  /**
   * libpq connection string for a database of this cluster, as the superuser, through the socket
   * in the cluster's private directory (for this process's OS user and root; no password).
   */
  connectionString(database = 'postgres'): string {
    return `postgresql://postgres@/${database}?host=${this.baseDir}&port=${this.port}`;
  }

  /** The same over TCP on 127.0.0.1, with the superuser's password: for a client running as another OS user. */
  tcpConnectionString(database = 'postgres'): string {
    return `postgresql://postgres:${this.password}@127.0.0.1:${this.port}/${database}`;
  }

  /** The environment for a client of this cluster started by hand (psql, pgbench): PGPASSWORD set. */
  clientEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
    return { ...env, PGPASSWORD: this.password };
  }

  /** Runs one of the cluster's binaries (pgbench, psql, ...) as the cluster's OS user, with PGPASSWORD set. */
  async exec(binary: string, args: string[], timeoutMs = 300_000): Promise<{ stdout: string; stderr: string }> {
    const path = join(this.pgBin, binary);
    const [file, argv] = this.asUser ? ['runuser', ['-u', this.asUser, '--', path, ...args]] : [path, args];
    try {
      return await run(file, argv, { cwd: this.baseDir, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, env: this.clientEnv() });
    } catch (error) {
      const e = error as { stderr?: string; message: string };
      throw new Error(`${binary} failed: ${(e.stderr || e.message).trim().split('\n').slice(-3).join(' | ')}`);
    }
  }

  /** Restarts the server (a new postmaster pid), as a DBA's `pg_ctl restart` would. */
  async restart(): Promise<void> {
    await this.exec('pg_ctl', ['-D', this.dataDir, '-l', join(this.baseDir, 'server.log'), '-m', 'fast', '-w', '-t', '60', 'restart']);
  }

  /** Stops the server and removes its directory; every caller, the first or a later one, waits for both. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      ThrowawayCluster.live.delete(this);
      if (existsSync(join(this.dataDir, 'postmaster.pid'))) {
        await this.exec('pg_ctl', ['-D', this.dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
      }
      rmSync(this.baseDir, { recursive: true, force: true });
    })();
    return this.stopping;
  }
}
