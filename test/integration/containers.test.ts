import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { GenericContainer, type StartedTestContainer, Wait } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Document, parseAllDocuments } from 'yaml';
import { packageRoot } from '../../src/package-root.js';
import { SidecarProcess } from '../../bench/sidecar-process.js';
import { expectColdReadCharged } from '../support/container-cold-read.js';
import { documentedBlocks } from '../support/markdown-blocks.js';
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

/** Resolves once a flush that began at least one interval after this call has been written (health.last_flush_at). */
async function twoFlushesLater(admin: pg.Client): Promise<void> {
  const since = (await admin.query('SELECT pg_catalog.clock_timestamp() AS t')).rows[0].t as Date;
  await expect
    .poll(
      async () =>
        (
          await admin.query(
            `SELECT pg_catalog.count(*)::int AS n FROM bpf_stats.health
              WHERE last_flush_at > $1::timestamptz + pg_catalog.make_interval(secs => interval_ms / 1000.0)`,
            [since],
          )
        ).rows[0].n,
      { timeout: 15_000, interval: 250 },
    )
    .toBeGreaterThan(0);
}

/**
 * The checks every placement shares, against the server `connectTo` reaches and whose postmaster
 * is `postmasterHostPid` on the host; `calls` where the collector runs the query set.
 */
function groundTruths(
  context: () => { connectTo: pg.ClientConfig; admin: pg.Client; postmasterHostPid: number },
  { calls = true }: { calls?: boolean } = {},
) {
  it("gives a CPU-bound query its backend's on-CPU time from the kernel (schedstat) and pg_stat_statements' execution time, within 15%", async () => {
    const { connectTo, admin, postmasterHostPid } = context();
    const client = await connect(connectTo);
    try {
      const nsPid = (await client.query('SELECT pg_catalog.pg_backend_pid() AS pid')).rows[0].pid as number;
      const hostPid = hostPidOf(nsPid, postmasterHostPid);
      const before = cpuTimeMs(hostPid);
      await client.query('SELECT pg_catalog.count(*) FROM pg_catalog.generate_series(1, 3000000) g WHERE g % 7 = 0');
      const kernelCpuMs = cpuTimeMs(hostPid) - before;
      // Without the query set there is no call to wait for: the flushes after the statement carry it.
      if (!calls) await twoFlushesLater(admin);
      const row = await statsFor(admin, '%generate_series($1, $2) g WHERE g % $3 = $4', (r) => !calls || r.calls === 1);
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

  // Not a skip: a collector without the query set (the pod spec's default sets) has no calls to compare; the other containers do.
  if (calls)
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

/** The docs' Kubernetes pod spec, as written there: the documents (a Secret, the Pod) of its section's yaml block. */
function documentedPodSpec(): Document[] {
  const [block] = documentedBlocks('containers-and-standbys.md', 'Kubernetes sidecar', 'yaml');
  return parseAllDocuments(block!) as Document[];
}

/** The four capabilities the default probe sets need (BPF 39, PERFMON 38, SYS_PTRACE 19, DAC_READ_SEARCH 2), as a /proc mask. */
const DEFAULT_SET_CAPABILITIES = [39, 38, 19, 2].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);

describe("the docs' Kubernetes pod spec, run as written (podman kube play): the collector beside PostgreSQL 17, one process namespace", () => {
  const podName = uniqueName('pg-bpf-stats-test-pod');
  let workDir: string;
  let specFile = '';
  const secrets: string[] = [];
  let connectTo: pg.ClientConfig;
  let admin: pg.Client;
  let postmasterHostPid = 0;
  let collectorHostPid = 0;
  let collectorRole = '';

  const collectorLog = () => containerLog(`${podName}-pg-bpf-stats`).catch((e: Error) => e.message);

  beforeAll(async () => {
    await requireContainerPrerequisites({ images: [POSTGRES_IMAGES[17]] });
    const image = await collectorImage();
    const documents = documentedPodSpec();
    const pod = documents.find((d) => d.get('kind') === 'Pod')!;
    const containers = pod.getIn(['spec', 'containers']) as { items: unknown[] };
    const index = (name: string) => containers.items.findIndex((c) => (c as { get(key: string): unknown }).get('name') === name);
    const [postgres, collector] = [index('postgres'), index('pg-bpf-stats')];
    workDir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-pod-'));

    // Only the names: the pod's and the Secret's (unique on this machine) and the two images (built here).
    pod.setIn(['metadata', 'name'], podName);
    pod.setIn(['spec', 'containers', postgres, 'image'], POSTGRES_IMAGES[17]);
    pod.setIn(['spec', 'containers', collector, 'image'], image);
    // podman 4.3 stores a played Secret as YAML text but reads a secretKeyRef only from a JSON
    // map of base64 values: each Secret goes in that way, and the Pod is played alone.
    const values = new Map<string, Record<string, string>>();
    const original = new Map<string, string>();
    for (const secret of documents.filter((d) => d.get('kind') === 'Secret')) {
      const name = String(secret.getIn(['metadata', 'name']));
      const data = (secret.get('stringData') as { toJSON(): Record<string, string> }).toJSON();
      const unique = uniqueName(`pg-bpf-stats-test-${name}`);
      const file = join(workDir, `${name}.json`);
      writeFileSync(
        file,
        JSON.stringify(Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')]))),
        {
          mode: 0o600,
        },
      );
      await podman(['secret', 'create', unique, file]);
      secrets.push(unique);
      values.set(name, data);
      original.set(unique, name);
      for (const c of [postgres, collector]) {
        const env = pod.getIn(['spec', 'containers', c, 'env']) as { items: unknown[] } | undefined;
        env?.items.forEach((_, e) => {
          const ref = ['spec', 'containers', c, 'env', e, 'valueFrom', 'secretKeyRef', 'name'];
          if (pod.getIn(ref) === name) pod.setIn(ref, unique);
        });
      }
    }
    /** The value a container's environment variable takes from the Secret, as written in the docs. */
    const secretValue = (container: number, variable: string) => {
      const env = (pod.getIn(['spec', 'containers', container, 'env']) as { toJSON(): Array<Record<string, unknown>> }).toJSON();
      const ref = (env.find((e) => e.name === variable)!.valueFrom as { secretKeyRef: { name: string; key: string } }).secretKeyRef;
      return values.get(original.get(ref.name)!)![ref.key]!;
    };
    // The seccomp profile the spec names, where podman looks for it (--seccomp-profile-root):
    // the annotation podman reads and the field Kubernetes reads name the same file.
    const annotation = String(pod.getIn(['metadata', 'annotations', 'container.seccomp.security.alpha.kubernetes.io/pg-bpf-stats']));
    const field = (pod.getIn(['spec', 'containers', collector, 'securityContext', 'seccompProfile']) as { toJSON(): object }).toJSON();
    expect(field).toEqual({ type: 'Localhost', localhostProfile: annotation.replace(/^localhost\//, '') });
    const profileRoot = join(workDir, 'seccomp');
    mkdirSync(profileRoot);
    copyFileSync(join(packageRoot(), 'deploy/seccomp/pg-bpf-stats.json'), join(profileRoot, annotation.replace(/^localhost\//, '')));
    specFile = join(workDir, 'pod.yaml');
    writeFileSync(specFile, pod.toString());
    await podman(['kube', 'play', '--seccomp-profile-root', profileRoot, specFile], { timeout: 180_000 });

    const infra = await podman(['pod', 'inspect', '--format', '{{.InfraContainerID}}', podName]);
    // The pod's network (podman's kube network): the host reaches it by the pod's address.
    const address = await podman(['inspect', '--format', '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}', infra]);
    expect(address).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    connectTo = { host: address, port: 5432, user: 'postgres', password: secretValue(postgres, 'POSTGRES_PASSWORD'), database: 'postgres' };
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
    // The collector's role, as docs/operations.md creates it (the roles its examples grant to
    // stand for a DBA's), with the Secret's password: the role the spec's DSN names.
    const args = (pod.getIn(['spec', 'containers', collector, 'args']) as { toJSON(): string[] }).toJSON();
    collectorRole = decodeURIComponent(new URL(args[args.indexOf('--dsn') + 1]!).username);
    await admin.query('CREATE ROLE alice LOGIN; CREATE ROLE grafana LOGIN');
    for (const block of documentedBlocks('operations.md', "The collector's role", 'sql')) await admin.query(block);
    await admin.query(
      `ALTER ROLE ${admin.escapeIdentifier(collectorRole)} PASSWORD ${admin.escapeLiteral(secretValue(collector, 'PGPASSWORD'))}`,
    );
    await waitFor(
      async () => /collecting every \d+ ms/.test(await collectorLog()),
      120_000,
      async () => `the collector in the pod did not start: ${await collectorLog()}`,
    );
    postmasterHostPid = await mainHostPid(`${podName}-postgres`);
    collectorHostPid = await mainHostPid(`${podName}-pg-bpf-stats`);
    await admin.query('SELECT public.pg_stat_statements_reset()');
  }, 420_000);

  afterAll(async () => {
    await admin?.end().catch(() => undefined);
    // Removed even when a test failed: the pod, its containers and its volumes, the secrets.
    if (specFile) await podman(['kube', 'down', specFile]).catch(() => podman(['pod', 'rm', '--force', podName]));
    for (const secret of secrets) await podman(['secret', 'rm', secret]).catch(() => undefined);
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }, 120_000);

  it('runs the collector as uid 10001 with exactly the four capabilities, no new privileges, a seccomp filter and a read-only root', async () => {
    const status = readFileSync(`/proc/${collectorHostPid}/status`, 'utf8');
    const field = (name: string) => new RegExp(`^${name}:\\s+(.*)$`, 'm').exec(status)![1]!.trim();
    // setpriv executed the collector in its place: the container's process is node, not root.
    expect(readFileSync(`/proc/${collectorHostPid}/cmdline`, 'utf8')).toContain('/opt/pg-bpf-stats/dist/pg-bpf-stats.js');
    expect(field('Uid').split(/\s+/)).toEqual(['10001', '10001', '10001', '10001']);
    expect(field('Gid').split(/\s+/)).toEqual(['10001', '10001', '10001', '10001']);
    for (const set of ['CapEff', 'CapPrm', 'CapInh', 'CapBnd', 'CapAmb'])
      expect(BigInt(`0x${field(set)}`), set).toBe(DEFAULT_SET_CAPABILITIES);
    expect(field('NoNewPrivs')).toBe('1');
    expect(field('Seccomp')).toBe('2');
    const readOnly = await podman(['inspect', '--format', '{{.HostConfig.ReadonlyRootfs}}', `${podName}-pg-bpf-stats`]);
    expect(readOnly).toBe('true');
  });

  it('connects as the documented role, which is not a superuser; the uprobe set query is refused, naming CAP_SYS_ADMIN', async () => {
    expect(collectorRole).toBe('bpf_stats_collector');
    const { rows } = await admin.query(
      `SELECT DISTINCT a.usename, r.rolsuper FROM pg_catalog.pg_stat_activity a JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
        WHERE a.application_name LIKE 'pg-bpf-stats%'`,
    );
    expect(rows).toEqual([{ usename: collectorRole, rolsuper: false }]);
    const { rows: owner } = await admin.query(
      "SELECT pg_catalog.pg_get_userbyid(nspowner) AS owner FROM pg_catalog.pg_namespace WHERE nspname = 'bpf_stats'",
    );
    expect(owner).toEqual([{ owner: collectorRole }]);
    const id = (await admin.query("SELECT bpf_stats.collect('{query}', interval '1 minute') AS id")).rows[0].id;
    const request = async () => (await admin.query('SELECT status, error FROM bpf_stats.collections WHERE id = $1', [id])).rows[0];
    await expect.poll(async () => (await request()).status, { timeout: 15_000, interval: 250 }).toMatch(/^(rejected|failed)$/);
    expect((await request()).error).toMatch(/CAP_SYS_ADMIN/);
  });

  it('sees the postmaster in the shared process namespace and its binary through its root', async () => {
    const log = await collectorLog();
    const line = log.split('\n').find((l) => /postmaster \d+ \(pid/.test(l));
    expect(line).toContain(`(pid ${postmasterHostPid} on the host`);
    expect(line).toContain('/usr/lib/postgresql/17/bin/postgres');
  });

  // The default sets only: the query set (calls) needs CAP_SYS_ADMIN, which the spec does not add.
  groundTruths(() => ({ connectTo, admin, postmasterHostPid }), { calls: false });

  it("charges a cold read to its statement: what PostgreSQL read (shared_blks_read), the relation's size (pg_relation_size)", async () => {
    await admin.query('CREATE EXTENSION IF NOT EXISTS pg_buffercache SCHEMA public');
    // About 48 MB; hint bits set now, so the measured scan only reads.
    await admin.query(
      `CREATE TABLE public.cold AS SELECT g AS id, pg_catalog.repeat('x', 200) AS pad FROM pg_catalog.generate_series(1, 200000) g`,
    );
    await admin.query('VACUUM (FREEZE) public.cold');
    await admin.query('CHECKPOINT');
    await expectColdReadCharged({
      admin,
      connect: () => connect(connectTo),
      postmasterHostPid,
      collectorHostPid,
      table: 'cold',
      flushed: () => twoFlushesLater(admin),
    });
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
