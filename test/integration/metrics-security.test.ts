import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import bcrypt from 'bcryptjs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';

/*
 * /metrics as a production exporter: TLS and basic authentication from an exporter-toolkit web
 * configuration, scraped by a real Prometheus (Debian's) with the password and without it; the
 * loopback default of `:PORT`; and a statement that sets a password, whose text is never
 * exported even with --metrics-query-text. Ground truth: Prometheus' own `up` and scrape errors,
 * the kernel's table of listening sockets, pg_stat_statements' text of the statement.
 */
const cli = cliPath();
const SCRAPE_PASSWORD = `scrape-${process.pid}`;
const ROLE_PASSWORD = `hunter2-${process.pid}`;
let cluster: ThrowawayCluster;
let dir: string;
let collector: ChildProcess | null = null;
let prometheus: ChildProcess | null = null;
let log = '';
let port = 0;
let promUrl = '';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port: p } = server.address() as { port: number };
      server.close(() => resolve(p));
    });
  });
}

async function until<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${log}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** GET /metrics over TLS, trusting only the test's certificate; status and body. */
function scrape(auth?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/metrics', ca: readFileSync(join(dir, 'cert.pem')), ...(auth && { auth }) },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

async function promQuery(query: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> {
  const body = (await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(query)}`)).json()) as {
    data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
  };
  return body.data.result;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  dir = mkdtempSync(join(tmpdir(), 'pgbpf-metrics-tls-'));
  const admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE ROLE app LOGIN');
  await admin.end();
  // A self-signed certificate for 127.0.0.1, made here.
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  writeFileSync(
    join(dir, 'web.yml'),
    `tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: ${bcrypt.hashSync(SCRAPE_PASSWORD, 10)}\n`,
  );
  // `:0`: no host, so the loopback address; the port is whatever is free.
  collector = spawn(
    process.execPath,
    [
      cli,
      'run',
      '--dsn',
      cluster.connectionString(),
      '--interval',
      '500ms',
      '--probes',
      'query',
      '--metrics-address',
      ':0',
      '--web.config.file',
      join(dir, 'web.yml'),
      '--metrics-query-text',
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  collector.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  port = Number(
    await until(
      'the metrics address in the log',
      async () => /metrics at https:\/\/127\.0\.0\.1:(\d+)\/metrics \(basic auth, with query text\)/.exec(log)?.[1],
    ),
  );
});

afterAll(async () => {
  for (const p of [collector, prometheus]) p?.kill('SIGTERM');
  await Promise.all([collector, prometheus].map((p) => (p && p.exitCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
  if (dir) rmSync(dir, { recursive: true, force: true });
  await cluster?.stop();
});

describe('/metrics with --web.config.file', () => {
  it('listens on the loopback address only when no host is given', () => {
    // /proc/net/tcp: local address in hex, little-endian; state 0A is LISTEN.
    const listening = readFileSync('/proc/net/tcp', 'utf8')
      .split('\n')
      .slice(1)
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f[3] === '0A' && f[1]?.endsWith(`:${port.toString(16).toUpperCase().padStart(4, '0')}`));
    expect(listening.map((f) => f[1])).toEqual([`0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`]);
    const v6 = readFileSync('/proc/net/tcp6', 'utf8');
    expect(v6).not.toContain(`:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000000000000000000000000000:0000 0A`);
  });

  it('answers 401 without the password or with a wrong one, and the metrics with it, over TLS only', async () => {
    expect((await scrape()).status).toBe(401);
    expect((await scrape('prometheus:wrong')).status).toBe(401);
    expect((await scrape(`root:${SCRAPE_PASSWORD}`)).status).toBe(401);
    const good = await until('a scrape after the first flush', async () => {
      const s = await scrape(`prometheus:${SCRAPE_PASSWORD}`);
      return s.status === 200 && s.body.includes('pg_bpf_stats_up 1') && s;
    });
    expect(good.body).toContain('# TYPE pg_bpf_query_calls_total counter');
    // No plain HTTP on the same port.
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });

  it('is scraped by Prometheus with the password, and refused to it without', async () => {
    const promPort = await freePort();
    promUrl = `http://127.0.0.1:${promPort}`;
    const target = `['127.0.0.1:${port}']`;
    const tls = `tls_config: { ca_file: ${join(dir, 'cert.pem')} }`;
    writeFileSync(
      join(dir, 'prometheus.yml'),
      `global: { scrape_interval: 1s, evaluation_interval: 1s }
scrape_configs:
  - job_name: with_password
    scheme: https
    ${tls}
    basic_auth: { username: prometheus, password: '${SCRAPE_PASSWORD}' }
    static_configs: [{ targets: ${target} }]
  - job_name: without_password
    scheme: https
    ${tls}
    static_configs: [{ targets: ${target} }]
`,
    );
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${promPort}`,
      ],
      { stdio: 'ignore' },
    );
    await until('Prometheus ready', async () => (await fetch(`${promUrl}/-/ready`)).ok);
    await until('both jobs scraped', async () => (await promQuery('up')).length === 2);
    await until(
      'the collector up, seen through Prometheus',
      async () => (await promQuery('pg_bpf_stats_up{job="with_password"}'))[0]?.value[1] === '1',
    );
    const up = Object.fromEntries((await promQuery('up')).map((r) => [r.metric.job, r.value[1]]));
    expect(up).toEqual({ with_password: '1', without_password: '0' });
    const targets = (await (await fetch(`${promUrl}/api/v1/targets`)).json()) as {
      data: { activeTargets: Array<{ labels: { job: string }; lastError: string }> };
    };
    expect(targets.data.activeTargets.find((t) => t.labels.job === 'without_password')?.lastError).toMatch(/401/);
    expect(await promQuery('pg_bpf_stats_up{job="without_password"}')).toEqual([]);
  });

  it('never exports the text of a statement that sets a password, even with --metrics-query-text', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    try {
      for (let i = 0; i < 50; i++) {
        await admin.query(`ALTER ROLE app PASSWORD '${ROLE_PASSWORD}'`);
        await admin.query('SELECT count(*) FROM generate_series(1, 1000) AS metrics_security_workload');
      }
      // Ground truth: pg_stat_statements keeps the password in the statement's text.
      const { rows } = await admin.query<{ queryid: string; query: string }>(
        "SELECT queryid::text, query FROM pg_stat_statements WHERE query LIKE 'ALTER ROLE app PASSWORD%'",
      );
      expect(rows).toHaveLength(1);
      expect(rows[0]!.query).toContain(ROLE_PASSWORD);
      const { rows: plain } = await admin.query<{ queryid: string }>(
        "SELECT queryid::text FROM pg_stat_statements WHERE query LIKE '%metrics_security_workload%' AND query NOT LIKE '%pg_stat_statements%'",
      );
      const body = await until('both statements in the info metric', async () => {
        const s = (await scrape(`prometheus:${SCRAPE_PASSWORD}`)).body;
        return (
          s.includes(`queryid="${rows[0]!.queryid}"`) &&
          s.includes(`pg_bpf_query_info{queryid="${plain[0]!.queryid}"`) &&
          s.includes(`pg_bpf_query_info{queryid="${rows[0]!.queryid}`) &&
          s
        );
      });
      const info = body.split('\n').filter((l) => l.startsWith('pg_bpf_query_info{'));
      expect(info.find((l) => l.includes(`queryid="${rows[0]!.queryid}"`))).toContain('query="(not shown: it may contain a password)"');
      expect(info.find((l) => l.includes(`queryid="${plain[0]!.queryid}"`))).toContain('metrics_security_workload');
      expect(body).not.toContain(ROLE_PASSWORD);
    } finally {
      await admin.end();
    }
  });

  it('stores a placeholder, never the password, as the text of such a statement in bpf_stats.query_texts', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    try {
      await admin.query(`ALTER ROLE app PASSWORD '${ROLE_PASSWORD}'`);
      const { rows } = await admin.query<{ queryid: string }>(
        "SELECT queryid::text FROM pg_stat_statements WHERE query LIKE 'ALTER ROLE app PASSWORD%'",
      );
      expect(rows).toHaveLength(1);
      // The collector's flushes write the texts of the statements they have figures for.
      const stored = await until('the statement in bpf_stats.query_texts', async () => {
        const { rows: texts } = await admin.query<{ query: string }>('SELECT query FROM bpf_stats.query_texts WHERE queryid = $1::int8', [
          rows[0]!.queryid,
        ]);
        return texts.length > 0 && texts;
      });
      expect(stored.map((t) => t.query)).toEqual(['(not shown: it may contain a password)']);
      const { rows: leaked } = await admin.query('SELECT query FROM bpf_stats.query_texts WHERE strpos(query, $1) > 0', [ROLE_PASSWORD]);
      expect(leaked).toEqual([]);
    } finally {
      await admin.end();
    }
  });
});
