import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { packageRoot } from '../../src/package-root.js';
import { SidecarProcess } from '../../bench/sidecar-process.js';
import { expectColdReadCharged } from '../support/container-cold-read.js';
import { cpuTimeMs } from '../support/cpu-time.js';
import { hostPidOf } from '../support/namespaced-cluster.js';
import {
  collectorImage,
  containerLog,
  mainHostPid,
  POSTGRES_IMAGES,
  podman,
  requireContainerPrerequisites,
  uniqueName,
} from '../support/podman.js';

/*
 * Real containers (podman with runc; docs/containers-and-standbys.md#real-containers-podman):
 * PostgreSQL 15 (Debian 12) and 17 (Debian 13) in containers started by testcontainers with
 * the collector on the host, connected through the mapped port; and the docs' Kubernetes pod
 * spec run as written with `podman kube play` (our collector image beside PostgreSQL, one
 * process namespace). Ground truth as on a bare host: a CPU-bound query's on-CPU time against
 * its backend's /proc/<host pid>/schedstat, calls against pg_stat_statements.
 */

/** The query_stats row of the one statement matching `pattern`, beside pg_stat_statements', once `until` holds. */
async function statsFor(admin: pg.Client, pattern: string, until: (row: StatsRow) => boolean): Promise<StatsRow> {
  let row: StatsRow | undefined;
  await expect
    .poll(
      async () => {
        const { rows } = await admin.query<StatsRow>(
          `SELECT s.calls::float8 AS pgss_calls, s.total_exec_time, q.calls::float8 AS calls, q.on_cpu_ms, q.runq_wait_ms
             FROM public.pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query LIKE $1`,
          [pattern],
        );
        row = rows[0];
        return rows.length === 1 && until(rows[0]!);
      },
      { timeout: 15_000, interval: 250 },
    )
    .toBe(true);
  return row!;
}

interface StatsRow {
  pgss_calls: number;
  total_exec_time: number;
  calls: number;
  on_cpu_ms: number;
  runq_wait_ms: number;
}

async function connect(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client({ ...config, options: '-c search_path=pg_catalog,pg_temp' });
  await client.connect();
  return client;
}

/** The checks both placements share, against the server `connectTo` reaches and whose postmaster is `postmasterHostPid` on the host. */
function groundTruths(context: () => { connectTo: pg.ClientConfig; admin: pg.Client; postmasterHostPid: number }) {
  it("gives a CPU-bound query its backend's on-CPU time from the kernel (schedstat) and pg_stat_statements' execution time, within 15%", async () => {
    const { connectTo, admin, postmasterHostPid } = context();
    const client = await connect(connectTo);
    try {
      const nsPid = (await client.query('SELECT pg_catalog.pg_backend_pid() AS pid')).rows[0].pid as number;
      const hostPid = hostPidOf(nsPid, postmasterHostPid);
      const before = cpuTimeMs(hostPid);
      await client.query('SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 3000000) g WHERE g % 7 = 0');
      const kernelCpuMs = cpuTimeMs(hostPid) - before;
      const row = await statsFor(admin, '%generate_series($1, $2) g WHERE g % $3 = $4', (r) => r.calls === 1);
      expect(kernelCpuMs).toBeGreaterThan(150);
      expect(row.on_cpu_ms / kernelCpuMs).toBeGreaterThan(0.85);
      expect(row.on_cpu_ms / kernelCpuMs).toBeLessThan(1.15);
      // On-CPU plus waiting for a CPU is the execution time PostgreSQL measured.
      expect((row.on_cpu_ms + row.runq_wait_ms) / row.total_exec_time).toBeGreaterThan(0.85);
      expect((row.on_cpu_ms + row.runq_wait_ms) / row.total_exec_time).toBeLessThan(1.15);
    } finally {
      await client.end();
    }
  });

  it('counts calls exactly as pg_stat_statements does', async () => {
    const { connectTo, admin } = context();
    const client = await connect(connectTo);
    try {
      for (let i = 0; i < 300; i++) await client.query('SELECT $1::int + 1 AS exact_calls_in_a_container', [i]);
    } finally {
      await client.end();
    }
    const row = await statsFor(admin, 'SELECT $1::int + $2 AS exact_calls_in_a_container', (r) => r.calls === r.pgss_calls);
    expect(row.pgss_calls).toBe(300);
    expect(row.calls).toBe(300);
  });
}

describe.each([15, 17] as const)('PostgreSQL %i in a container, the collector on the host (DSN through the mapped port)', (major) => {
  const password = randomBytes(12).toString('hex');
  let container: StartedTestContainer | undefined;
  let connectTo: pg.ClientConfig;
  let admin: pg.Client;
  let collector: SidecarProcess | undefined;
  let postmasterHostPid = 0;

  beforeAll(async () => {
    await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[major]] });
    container = await new GenericContainer(POSTGRES_IMAGES[major])
      .withName(uniqueName(`pg-bpf-stats-test-pg${major}`))
      .withEnvironment({ POSTGRES_PASSWORD: password })
      .withCommand(['postgres', '-c', 'shared_preload_libraries=pg_stat_statements'])
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage('database system is ready to accept connections'))
      .withStartupTimeout(120_000)
      .start();
    postmasterHostPid = await mainHostPid(container.getId());
    connectTo = { host: '127.0.0.1', port: container.getMappedPort(5432), user: 'postgres', password, database: 'postgres' };
    admin = await connect(connectTo);
    await admin.query('CREATE EXTENSION pg_stat_statements SCHEMA public');
    ({ sidecar: collector } = await SidecarProcess.start({
      dsn: `postgresql://postgres@127.0.0.1:${connectTo.port}/postgres`,
      interval: '200ms',
      probes: 'query',
      env: { PGPASSWORD: password },
    }));
  }, 240_000);

  afterAll(async () => {
    try {
      if (collector) expect(await collector.stop(), collector.log()).toBe(0);
    } finally {
      await admin?.end();
      await container?.stop({ timeout: 5_000 });
    }
  }, 60_000);

  it("finds the postmaster behind the container's port and its binary through /proc/<pid>/root", () => {
    const host = postmasterHostPid;
    const line = collector!
      .log()
      .split('\n')
      .find((l) => /postmaster \d+ \(pid/.test(l));
    // The entrypoint executes the server: it is the container's process 1.
    expect(line).toContain(`postmaster 1 (pid ${host} on the host, pid namespace level 1)`);
    expect(line).toContain(`/proc/${host}/root/usr/lib/postgresql/${major}/bin/postgres`);
  });

  groundTruths(() => ({ connectTo, admin, postmasterHostPid }));
});

/** Waits until `done` holds, or throws what `failure` says (expect.poll is for tests, not hooks). */
async function waitFor(done: () => Promise<boolean>, timeoutMs: number, failure: () => Promise<string>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(await failure());
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The docs' Kubernetes pod spec, as written there (the first yaml block of its section). */
function documentedPodSpec(): string {
  const doc = readFileSync(join(packageRoot(), 'docs', 'containers-and-standbys.md'), 'utf8');
  const section = doc.slice(doc.indexOf('### Kubernetes sidecar'));
  const block = /```yaml\n([\s\S]*?)```/.exec(section);
  if (!block) throw new Error('docs/containers-and-standbys.md: no yaml block under "Kubernetes sidecar"');
  return block[1]!;
}

describe("the docs' Kubernetes pod spec, run as written (podman kube play): the collector beside PostgreSQL 17, one process namespace", () => {
  const podName = uniqueName('pg-bpf-stats-test-pod');
  let workDir: string;
  let specFile = '';
  let connectTo: pg.ClientConfig;
  let admin: pg.Client;
  let postmasterHostPid = 0;
  let collectorHostPid = 0;

  const collectorLog = () => containerLog(`${podName}-pg-bpf-stats`).catch((e: Error) => e.message);

  beforeAll(async () => {
    await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[17]] });
    const image = await collectorImage();
    const spec = parseDocument(documentedPodSpec());
    // Only the names: the pod's (unique on this machine) and the two images (built here).
    spec.setIn(['metadata', 'name'], podName);
    const containers = spec.getIn(['spec', 'containers']) as { items: unknown[] };
    const index = (name: string) => containers.items.findIndex((c) => (c as { get(key: string): unknown }).get('name') === name);
    spec.setIn(['spec', 'containers', index('postgres'), 'image'], POSTGRES_IMAGES[17]);
    spec.setIn(['spec', 'containers', index('pg-bpf-stats'), 'image'], image);
    workDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-pod-'));
    specFile = join(workDir, 'pod.yaml');
    writeFileSync(specFile, spec.toString());
    await podman(['kube', 'play', specFile], { timeout: 180_000 });

    const password = String(spec.getIn(['spec', 'containers', index('postgres'), 'env', 0, 'value']));
    const infra = await podman(['pod', 'inspect', '--format', '{{.InfraContainerID}}', podName]);
    // The pod's network (podman's kube network): the host reaches it by the pod's address.
    const address = await podman(['inspect', '--format', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', infra]);
    expect(address).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    connectTo = { host: address, port: 5432, user: 'postgres', password, database: 'postgres' };
    // The server starts with the pod; the collector retries until it answers (restartPolicy).
    const deadline = Date.now() + 120_000;
    for (;;) {
      try {
        admin = await connect(connectTo);
        break;
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public');
    await waitFor(
      async () => /collecting every \d+ ms/.test(await collectorLog()),
      120_000,
      async () => `the collector in the pod did not start: ${await collectorLog()}`,
    );
    postmasterHostPid = await mainHostPid(`${podName}-postgres`);
    collectorHostPid = await mainHostPid(`${podName}-pg-bpf-stats`);
    // The spec runs the default probe sets; calls come with the query set, asked for over SQL.
    await admin.query("SELECT bpf_stats.collect('{query}', interval '10 minutes')");
    const status = async () => (await admin.query('SELECT status FROM bpf_stats.collections ORDER BY id DESC LIMIT 1')).rows[0]?.status;
    await waitFor(
      async () => (await status()) === 'running',
      30_000,
      async () => `the query set did not start: ${await status()}`,
    );
    await admin.query('SELECT public.pg_stat_statements_reset()');
  }, 420_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    // Removed even when a test failed: the pod, its containers and its volumes.
    if (specFile) await podman(['kube', 'down', specFile]).catch(() => podman(['pod', 'rm', '--force', podName]));
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }, 120_000);

  it('runs the collector with exactly the capabilities the spec adds, on a read-only root filesystem', async () => {
    const status = readFileSync(`/proc/${collectorHostPid}/status`, 'utf8');
    // BPF 39, PERFMON 38, SYS_PTRACE 19, DAC_READ_SEARCH 2, SYS_ADMIN 21.
    const expected = [39, 38, 19, 2, 21].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);
    expect(BigInt(`0x${/^CapEff:\s+(\w+)/m.exec(status)![1]}`)).toBe(expected);
    expect(/^Uid:\s+(\d+)/m.exec(status)![1]).toBe('0');
    const readOnly = await podman(['inspect', '--format', '{{.HostConfig.ReadonlyRootfs}}', `${podName}-pg-bpf-stats`]);
    expect(readOnly).toBe('true');
  });

  it('sees the postmaster in the shared process namespace and its binary through its root', async () => {
    const log = await collectorLog();
    const line = log.split('\n').find((l) => /postmaster \d+ \(pid/.test(l));
    expect(line).toContain(`(pid ${postmasterHostPid} on the host`);
    expect(line).toContain('/usr/lib/postgresql/17/bin/postgres');
  });

  groundTruths(() => ({ connectTo, admin, postmasterHostPid }));

  it("charges a cold read to its statement: what PostgreSQL read (shared_blks_read), the relation's size (pg_relation_size)", async () => {
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_buffercache SCHEMA public');
    // About 48 MB; hint bits set now, so the measured scan only reads.
    await admin.query(
      `CREATE TABLE public.cold AS SELECT g AS id, pg_catalog.repeat('x', 200) AS pad FROM pg_catalog.generate_series(1, 200000) g`,
    );
    await admin.query('VACUUM (FREEZE) public.cold');
    await admin.query('CHECKPOINT');
    await expectColdReadCharged({ admin, connect: () => connect(connectTo), postmasterHostPid, collectorHostPid, table: 'cold' });
  }, 120_000);
});

describe("the collector's image as its own user (uid 10001, ambient capabilities) beside PostgreSQL 17: its pid and network namespaces shared, read-only root", () => {
  const password = randomBytes(12).toString('hex');
  const name = uniqueName('pg-bpf-stats-test-image');
  let server: StartedTestContainer | undefined;
  let connectTo: pg.ClientConfig;
  let admin: pg.Client;
  let postmasterHostPid = 0;
  let started = false;

  beforeAll(async () => {
    await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[17]] });
    const image = await collectorImage();
    server = await new GenericContainer(POSTGRES_IMAGES[17])
      .withName(uniqueName('pg-bpf-stats-test-pg17-image'))
      .withEnvironment({ POSTGRES_PASSWORD: password })
      .withCommand(['postgres', '-c', 'shared_preload_libraries=pg_stat_statements'])
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage('database system is ready to accept connections'))
      .withStartupTimeout(120_000)
      .start();
    postmasterHostPid = await mainHostPid(server.getId());
    connectTo = { host: '127.0.0.1', port: server.getMappedPort(5432), user: 'postgres', password, database: 'postgres' };
    admin = await connect(connectTo);
    await admin.query('CREATE EXTENSION pg_stat_statements SCHEMA public');
    const caps = ['BPF', 'PERFMON', 'SYS_PTRACE', 'DAC_READ_SEARCH', 'SYS_ADMIN'].flatMap((c) => ['--cap-add', c]);
    const target = `container:${server.getId()}`;
    await podman([
      'run',
      '-d',
      '--name',
      name,
      '--read-only',
      '--cap-drop',
      'ALL',
      ...caps,
      '--pid',
      target,
      '--network',
      target,
      '-e',
      `PGPASSWORD=${password}`,
      image,
      'run',
      '--dsn',
      'postgresql://postgres@localhost:5432/postgres',
      '--interval',
      '200ms',
      '--probes',
      'query',
    ]);
    started = true;
    const log = () => containerLog(name).catch((e: Error) => e.message);
    await waitFor(
      async () => /collecting every \d+ ms/.test(await log()),
      120_000,
      async () => `the collector did not start: ${await log()}`,
    );
  }, 420_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    if (started) await podman(['rm', '--force', '--volumes', '--time', '10', name]).catch(() => undefined);
    await server?.stop({ timeout: 5_000 });
  }, 120_000);

  it('runs as uid 10001 with exactly the capabilities added', async () => {
    const status = readFileSync(`/proc/${await mainHostPid(name)}/status`, 'utf8');
    expect(/^Uid:\s+(\d+)/m.exec(status)![1]).toBe('10001');
    const expected = [39, 38, 19, 2, 21].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);
    expect(BigInt(`0x${/^CapEff:\s+(\w+)/m.exec(status)![1]}`)).toBe(expected);
  });

  groundTruths(() => ({ connectTo, admin, postmasterHostPid }));
});

/**
 * Runs a container to its end: its exit code and its two streams, whatever the code (podman run
 * passes the container's on). The container is removed even when it outlives the timeout.
 */
async function podmanRunToEnd(name: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    return await new Promise((resolve, reject) => {
      execFile('podman', ['run', '--rm', '--name', name, ...args], { timeout: 60_000, maxBuffer: 1 << 24 }, (error, stdout, stderr) => {
        const code = error ? (error as { code?: unknown }).code : 0;
        if (typeof code !== 'number') reject(error);
        else resolve({ code, stdout, stderr });
      });
    });
  } finally {
    await podman(['rm', '--force', '--ignore', '--time', '0', name]).catch(() => undefined);
  }
}

describe("the collector's image without one of its libraries, beside PostgreSQL 17: one line naming it, exit 2", () => {
  const password = randomBytes(12).toString('hex');
  /** Each library the native addon loads, and the Debian package that ships it. */
  const LIBRARIES = { 'libbpf.so.1': 'libbpf1', 'libelf.so.1': 'libelf1t64' } as const;
  /** The image built without each library (its package purged in a layer of its own). */
  const withoutLibrary = new Map<string, string>();
  let server: StartedTestContainer | undefined;
  let workDir = '';

  beforeAll(async () => {
    await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[17]] });
    const image = await collectorImage();
    workDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-no-library-'));
    for (const [library, debianPackage] of Object.entries(LIBRARIES)) {
      const tag = `localhost/pg-bpf-stats-test-without-${library.replace(/\W/g, '-')}:${uniqueName('t')}`;
      writeFileSync(
        join(workDir, 'Containerfile'),
        // The package removed (what depends on it left alone), as in a base image that lacks it.
        `FROM ${image}\nUSER 0\nRUN dpkg --purge --force-depends ${debianPackage} && ! ldconfig -p | grep -qF '${library}'\nUSER 10001:10001\n`,
      );
      await podman(['build', '--quiet', '-t', tag, workDir], { timeout: 300_000 });
      withoutLibrary.set(library, tag);
    }
    server = await new GenericContainer(POSTGRES_IMAGES[17])
      .withName(uniqueName('pg-bpf-stats-test-pg17-no-library'))
      .withEnvironment({ POSTGRES_PASSWORD: password })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage('database system is ready to accept connections'))
      .withStartupTimeout(120_000)
      .start();
  }, 600_000);

  afterAll(async () => {
    await server?.stop({ timeout: 5_000 });
    for (const tag of withoutLibrary.values()) await podman(['rmi', '--force', tag]).catch(() => undefined);
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }, 120_000);

  for (const library of Object.keys(LIBRARIES)) {
    it.each(['run', 'check'])(`${library} missing: \`%s\` prints one line naming it and exits 2, no stack trace`, async (command) => {
      const target = `container:${server!.getId()}`;
      const caps = ['BPF', 'PERFMON', 'SYS_PTRACE', 'DAC_READ_SEARCH', 'SYS_ADMIN'].flatMap((c) => ['--cap-add', c]);
      const result = await podmanRunToEnd(uniqueName(`pg-bpf-stats-test-no-${library.replace(/\W/g, '-')}-${command}`), [
        '--read-only',
        '--cap-drop',
        'ALL',
        ...caps,
        '--pid',
        target,
        '--network',
        target,
        '-e',
        `PGPASSWORD=${password}`,
        withoutLibrary.get(library)!,
        command,
        '--dsn',
        'postgresql://postgres@localhost:5432/postgres',
      ]);
      const lines = result.stderr.trim().split('\n');
      console.log(`${library} missing, ${command}: exit ${result.code}; stderr: ${result.stderr.trim()}; stdout: ${result.stdout.trim()}`);
      expect(result.code).toBe(2);
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`ERROR .*\\b${library.replace(/\./g, '\\.')} is missing`));
      expect(result.stderr).not.toMatch(/^\s+at /m);
    });
  }
});

describe('a missing prerequisite of the container tests', () => {
  it('is named in one line: podman, its API service, an image', async () => {
    const emptyPath = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-no-podman-'));
    try {
      await expect(requireContainerPrerequisites({ path: emptyPath })).rejects.toThrow(
        /^container tests: podman is not installed \(bash scripts\/bootstrap\.sh installs it, as root\)$/,
      );
    } finally {
      rmSync(emptyPath, { recursive: true, force: true });
    }
    await expect(requireContainerPrerequisites({ socket: join(tmpdir(), 'pg-bpf-stats-no-such.sock') })).rejects.toThrow(
      /^container tests: podman's API service does not answer on .*no-such\.sock \(bash scripts\/podman-service\.sh starts it\)$/,
    );
    await expect(requireContainerPrerequisites({ images: ['localhost/pg-bpf-stats-no-such-image:0'] })).rejects.toThrow(
      /^container tests: the image localhost\/pg-bpf-stats-no-such-image:0 is missing \(bash scripts\/container-images\.sh builds it\)$/,
    );
  });
});
