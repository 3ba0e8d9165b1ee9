import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath, packageRoot } from '../../src/package-root.js';
import { collectCpuBurn } from '../support/collect-cpu-burn.js';

/*
 * The collector under the systemd unit's credentials (scripts/systemd/pg-bpf-stats.service):
 * a dedicated non-root user, the unit's ambient capabilities and bounding set, no new
 * privileges, reproduced with setpriv. Ground truth: the scheduler's own CPU time.
 */
const run = promisify(execFile);
const cli = cliPath();
const unitPath = join(packageRoot(), 'scripts/systemd/pg-bpf-stats.service');
const USER = 'pgbpf-test';

/** The unit's AmbientCapabilities, e.g. ['bpf', 'perfmon', ...] as setpriv names them. */
function unitCapabilities(): string[] {
  const line = readFileSync(unitPath, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('AmbientCapabilities='))!;
  return line
    .slice('AmbientCapabilities='.length)
    .trim()
    .split(/\s+/)
    .map((c) => c.replace(/^CAP_/, '').toLowerCase());
}

/** The cluster over TCP without the password (--dsn refuses one): it comes from PGPASSWORD (cluster.clientEnv()). */
function passwordless(database: string): string {
  return cluster.tcpConnectionString(database).replace(`:${cluster.password}@`, '@');
}

function asServiceUser(capabilities: string[]): string[] {
  const caps = capabilities.length ? capabilities.map((c) => `+${c}`).join(',') : '-all';
  return [
    'setpriv',
    `--reuid=${USER}`,
    `--regid=${USER}`,
    '--clear-groups',
    '--no-new-privs',
    `--inh-caps=${caps}`,
    `--ambient-caps=${caps}`,
    `--bounding-set=-all${capabilities.length ? `,${caps}` : ''}`,
    process.execPath,
    cli,
  ];
}

let cluster: ThrowawayCluster;
let createdUser = false;

beforeAll(async () => {
  expect(existsSync(cli), 'the CLI is built (npm run build)').toBe(true);
  if (
    !readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .some((l) => l.startsWith(`${USER}:`))
  ) {
    execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', USER]);
    createdUser = true;
  }
  cluster = await ThrowawayCluster.start();
});

afterAll(async () => {
  await cluster?.stop();
  if (createdUser) execFileSync('userdel', [USER]);
});

async function schemaExists(database: string): Promise<boolean> {
  const client = new pg.Client(cluster.connectionString(database));
  await client.connect();
  try {
    return (await client.query("SELECT 1 FROM pg_namespace WHERE nspname = 'bpf_stats'")).rows.length > 0;
  } finally {
    await client.end();
  }
}

describe('the systemd unit', () => {
  it('asks for exactly the four measured capabilities, and passes systemd-analyze verify', async () => {
    expect(unitCapabilities()).toEqual(['bpf', 'perfmon', 'sys_ptrace', 'dac_read_search']);
    // verify checks that ExecStart is an executable: point it at the built CLI, as npm's bin link would.
    const dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-unit-'));
    try {
      const bin = join(dir, 'pg-bpf-stats');
      writeFileSync(bin, `#!/bin/sh\nexec ${process.execPath} ${cli} "$@"\n`, { mode: 0o755 });
      const unit = readFileSync(unitPath, 'utf8').replace('/usr/local/bin/pg-bpf-stats', bin);
      writeFileSync(join(dir, 'pg-bpf-stats.service'), unit);
      const { stderr } = await run('systemd-analyze', ['verify', join(dir, 'pg-bpf-stats.service')]);
      expect(stderr).toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a non-root user with the unit capabilities', () => {
  it('collects: the on-CPU time it writes matches the scheduler', async () => {
    const outcome = await collectCpuBurn(cluster, asServiceUser(unitCapabilities()));
    expect(outcome.code, outcome.stderr).toBe(0);
    expect(outcome.oursMs, outcome.stderr).not.toBeNull();
    expect(Math.abs(outcome.oursMs! - outcome.truthMs)).toBeLessThanOrEqual(0.1 * outcome.truthMs + 20);
  });

  it("keeps V8's code cache in systemd's CacheDirectory= and starts from it", async () => {
    // What systemd makes for CacheDirectory=pg-bpf-stats: a directory the service user owns,
    // named by CACHE_DIRECTORY. The package directory is root's: the cache cannot go there.
    const cacheDirectory = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-cache-'));
    const uid = Number(execFileSync('id', ['-u', USER], { encoding: 'utf8' }));
    try {
      chownSync(cacheDirectory, uid, uid);
      const env = { ...process.env, CACHE_DIRECTORY: cacheDirectory };
      const first = await collectCpuBurn(cluster, asServiceUser(unitCapabilities()), env);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stderr).toMatch(
        new RegExp(`INFO\\s+saved V8's code cache for the next start \\(${cacheDirectory}/pg-bpf-stats\\.cjs\\.v8-cache, `),
      );
      expect(readdirSync(cacheDirectory)).toEqual(['pg-bpf-stats.cjs.v8-cache']);
      expect(statSync(join(cacheDirectory, 'pg-bpf-stats.cjs.v8-cache')).uid).toBe(uid);

      const second = await collectCpuBurn(cluster, asServiceUser(unitCapabilities()), env);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stderr).toMatch(/collecting every/);
      expect(second.stderr).not.toMatch(/code cache/);
    } finally {
      rmSync(cacheDirectory, { recursive: true, force: true });
    }
  });

  it('without any one of them: exit 2, one line naming it, nothing created', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    try {
      for (const missing of unitCapabilities()) {
        const database = `without_${missing}`;
        await admin.query(`CREATE DATABASE ${database}`);
        const [file, ...args] = asServiceUser(unitCapabilities().filter((c) => c !== missing));
        const outcome = await run(file!, [...args, 'run', '--dsn', passwordless(database)], { env: cluster.clientEnv() }).then(
          () => ({ code: 0, stderr: '' }),
          (e: { code: number; stderr: string }) => e,
        );
        expect(outcome.code, missing).toBe(2);
        const lines = outcome.stderr.trim().split('\n');
        expect(lines, missing).toHaveLength(1);
        expect(lines[0]).toMatch(new RegExp(`ERROR pg-bpf-stats needs CAP_${missing.toUpperCase()} \\(`));
        expect(await schemaExists(database), `${missing}: nothing created`).toBe(false);
      }
    } finally {
      await admin.end();
    }
  });

  it('refuses the uprobe sets by name without CAP_SYS_ADMIN, before creating anything', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    await admin.query('CREATE DATABASE uprobe_sets');
    await admin.end();
    const [file, ...args] = asServiceUser(unitCapabilities());
    const outcome = await run(file!, [...args, 'run', '--probes', 'query,lwlock,sched', '--dsn', passwordless('uprobe_sets')], {
      env: cluster.clientEnv(),
    }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(outcome.code).toBe(2);
    expect(outcome.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/ERROR probe sets query, lwlock need CAP_SYS_ADMIN \(attaching uprobes/),
    ]);
    expect(await schemaExists('uprobe_sets')).toBe(false);

    // check says the same, per set, and still exits 0 (they are opt-in).
    const check = await run(file!, [...args, 'check', '--dsn', passwordless('uprobe_sets')], { env: cluster.clientEnv() });
    for (const set of ['query', 'locks', 'lwlock', 'spinlock']) {
      expect(check.stdout).toMatch(new RegExp(`^no +probes ${set} +unsupported: probe set ${set} needs CAP_SYS_ADMIN`, 'm'));
    }
    expect(check.stdout).toMatch(/^ok +probes cpu /m);
  });
});
