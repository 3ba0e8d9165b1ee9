import { execFileSync, spawn } from 'node:child_process';
import bcrypt from 'bcryptjs';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrometheusExporter } from '../../src/exporters/prometheus/prometheus-exporter.js';
import { readWebConfig } from '../../src/exporters/prometheus/web-config.js';
import { startMetrics } from '../../src/exporters/prometheus/start-metrics.js';
import { UserError } from '../../src/errors.js';
import { packageRoot } from '../../src/package-root.js';

/*
 * --web.config.file over real HTTP(S) on 127.0.0.1, without a database. client_auth_type over real TLS on 127.0.0.1: the two types node's TLS options cannot express
 * (RequireAnyClientCert, VerifyClientCertIfGiven) must refuse what they refuse in the exporter
 * toolkit. Certificates made here with openssl: a CA, a client certificate it signed, and a
 * self-signed client certificate it did not.
 */
let dir: string;
const file = (name: string) => join(dir, name);
const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-client-certs-'));
  const selfSigned = (name: string, cn: string, ...extra: string[]) =>
    openssl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      file(`${name}.key`),
      '-out',
      file(`${name}.pem`),
      '-days',
      '1',
      '-subj',
      `/CN=${cn}`,
      ...extra,
    );
  selfSigned('server', '127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1');
  selfSigned('ca', 'test ca');
  selfSigned('rogue', 'rogue client');
  openssl('req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('client.key'), '-out', file('client.csr'), '-subj', '/CN=client');
  openssl(
    'x509',
    '-req',
    '-in',
    file('client.csr'),
    '-CA',
    file('ca.pem'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-out',
    file('client.pem'),
    '-days',
    '1',
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** An exporter with this client_auth_type (no database: /metrics answers with what it has). */
async function exporter(clientAuth: string): Promise<PrometheusExporter> {
  writeFileSync(
    file('web.yml'),
    `tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: ${clientAuth}\n  client_ca_file: ca.pem\n`,
  );
  return PrometheusExporter.listen({
    address: { host: '127.0.0.1', port: 0 },
    connectionString: undefined,
    webConfig: readWebConfig(file('web.yml')),
    log: () => undefined,
  });
}

/** GET /metrics's status with this client certificate (none: undefined); 0 when the TLS handshake is refused. */
function status(port: number, client?: 'client' | 'rogue'): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/metrics',
        ca: readFileSync(file('server.pem')),
        agent: false,
        ...(client && { cert: readFileSync(file(`${client}.pem`)), key: readFileSync(file(`${client}.key`)) }),
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    req.end();
  });
}

describe('client_auth_type', () => {
  it('RequireAnyClientCert refuses a client without a certificate, and takes any certificate', async () => {
    const e = await exporter('RequireAnyClientCert');
    try {
      expect(await status(e.address.port)).toBe(401);
      expect(await status(e.address.port, 'client')).toBe(200);
      expect(await status(e.address.port, 'rogue')).toBe(200);
    } finally {
      await e.close();
    }
  });

  it('VerifyClientCertIfGiven takes a client without one or with a verified one, and refuses one that does not verify', async () => {
    const e = await exporter('VerifyClientCertIfGiven');
    try {
      expect(await status(e.address.port)).toBe(200);
      expect(await status(e.address.port, 'client')).toBe(200);
      expect(await status(e.address.port, 'rogue')).toBe(401);
    } finally {
      await e.close();
    }
  });

  it('RequireAndVerifyClientCert takes only a verified certificate (node refuses the handshake)', async () => {
    const e = await exporter('RequireAndVerifyClientCert');
    try {
      expect(await status(e.address.port)).not.toBe(200);
      expect(await status(e.address.port, 'rogue')).not.toBe(200);
      expect(await status(e.address.port, 'client')).toBe(200);
    } finally {
      await e.close();
    }
  });
});

describe('basic authentication while an address has two checks waiting', () => {
  it('answers 503 with Retry-After to credentials it did not check, not 401', async () => {
    writeFileSync(file('auth.yml'), `basic_auth_users:\n  prometheus: ${bcrypt.hashSync('right horse', 12)}\n`);
    const e = await PrometheusExporter.listen({
      address: { host: '127.0.0.1', port: 0 },
      connectionString: undefined,
      webConfig: readWebConfig(file('auth.yml')),
      log: () => undefined,
    });
    const get = (password: string) =>
      fetch(`http://127.0.0.1:${e.address.port}/metrics`, {
        headers: { Authorization: `Basic ${Buffer.from(`prometheus:${password}`).toString('base64')}` },
      });
    try {
      // Two guesses take this address's two places (cost 12: the first still runs when the third arrives).
      const guesses = [get('guess 1'), get('guess 2')];
      await new Promise((r) => setTimeout(r, 300));
      const busy = await get('right horse');
      expect(busy.status).toBe(503);
      expect(busy.headers.get('retry-after')).toBe('1');
      expect((await Promise.all(guesses)).map((r) => r.status)).toEqual([401, 401]);
      expect((await get('right horse')).status).toBe(200);
    } finally {
      await e.close();
    }
  });
});

describe('basic authentication under two streams of wrong guesses', () => {
  it("lets a scraper that has not logged in yet in on (nearly) every try, and keeps the event loop's delays short", async () => {
    // 25 users: each try of the scraper is a first login (after a restart nobody is remembered), which needs a check.
    const users = Array.from({ length: 25 }, (_, i) => `scraper${i}`);
    writeFileSync(
      file('streams.yml'),
      `basic_auth_users:\n${users.map((u) => `  ${u}: ${bcrypt.hashSync(`right horse ${u}`, 10)}\n`).join('')}`,
    );
    const e = await PrometheusExporter.listen({
      address: { host: '127.0.0.1', port: 0 },
      connectionString: undefined,
      webConfig: readWebConfig(file('streams.yml')),
      log: () => undefined,
    });
    // Each from an address of its own (all of 127/8 is this host): the exporter tells sources by it.
    const get = (user: string, password: string, localAddress: string, timeoutMs = 10_000) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          {
            host: '127.0.0.1',
            port: e.address.port,
            path: '/metrics',
            localAddress,
            agent: false,
            timeout: timeoutMs,
            headers: { Authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` },
          },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          },
        );
        req.on('timeout', () => req.destroy(new Error('timed out')));
        req.on('error', reject);
        req.end();
      });
    // The guessers in a process of their own (as they would be), so that the delays measured here are the exporter's.
    const guessers = spawn(
      process.execPath,
      [
        '-e',
        `const http = require('node:http');
         const [port, users] = [Number(process.argv[1]), JSON.parse(process.argv[2])];
         const counts = {};
         const get = (user, password, localAddress) => new Promise((resolve) => {
           const req = http.request({ host: '127.0.0.1', port, path: '/metrics', localAddress, agent: false,
             headers: { Authorization: 'Basic ' + Buffer.from(user + ':' + password).toString('base64') } },
             (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
           req.on('error', () => resolve(0));
           req.end();
         });
         // Two streams (addresses), ten requests in flight each, each sent as soon as the last is answered.
         for (const address of ['127.0.0.2', '127.0.0.3'])
           for (let n = 0; n < 10; n++)
             (async () => { for (let i = 0; ; i++) { const s = await get(users[(i + n) % users.length], 'guess ' + i, address); counts[s] = (counts[s] || 0) + 1; } })();
         process.on('SIGTERM', () => { process.stdout.write(JSON.stringify(counts)); process.exit(0); });`,
        String(e.address.port),
        JSON.stringify(users),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let guessed = '';
    guessers.stdout!.on('data', (d: Buffer) => (guessed += d.toString()));
    // How busy the main thread's event loop is (bcryptjs on it kept it busy through every check,
    // in slices of up to 100 ms): its utilization, which does not count the time this shared,
    // loaded machine leaves it waiting idle, as timer delays would.
    let worstLagMs = 0;
    let last = performance.now();
    const lag = setInterval(() => {
      const now = performance.now();
      worstLagMs = Math.max(worstLagMs, now - last - 10);
      last = now;
    }, 10);
    const loopBefore = performance.eventLoopUtilization();
    try {
      await new Promise((r) => setTimeout(r, 500));
      // 25 tries in about 5 s, each one given up after 2 s (a scrape timeout's share).
      const tries: number[] = [];
      const started = Date.now();
      for (let i = 0; i < 25; i++) {
        tries.push(await get(users[i]!, `right horse ${users[i]}`, '127.0.0.1', 2000).catch(() => 0));
        await new Promise((r) => setTimeout(r, Math.max(0, started + (i + 1) * 200 - Date.now())));
      }
      const ok = tries.filter((s) => s === 200).length;
      const loopBusy = performance.eventLoopUtilization(loopBefore).utilization;
      const exited = new Promise((r) => guessers.once('exit', r));
      guessers.kill('SIGTERM');
      await exited;
      const answered = JSON.parse(guessed || '{}') as Record<string, number>;
      console.log(
        `scraper's first logins: ${ok}/25 in ${Date.now() - started} ms (${tries.join(' ')}); guesses answered by status: ${guessed}; worst event-loop delay ${worstLagMs.toFixed(0)} ms, event loop busy ${(100 * loopBusy).toFixed(0)}% of the time`,
      );
      expect(ok, tries.join(' ')).toBeGreaterThanOrEqual(24);
      expect(answered['200']).toBeUndefined();
      expect(answered['401']).toBeGreaterThan(4);
      expect(loopBusy).toBeLessThan(0.5);
    } finally {
      guessers.kill('SIGKILL');
      clearInterval(lag);
      await e.close();
    }
  }, 120_000);
});

describe('the bcrypt thread in the bundle', () => {
  it("carries bcryptjs' file as published, its licence notice with it, and reads nothing of node_modules (not shipped)", () => {
    const bundle = readFileSync(join(packageRoot(), 'dist', 'pg-bpf-stats.cjs'), 'utf8');
    for (const line of [
      'Copyright (c) 2012 Nevins Bartolomeo <nevins.bartolomeo@gmail.com>',
      'Redistributions in binary form must reproduce the above copyright',
      'compareSync',
    ])
      expect(bundle).toContain(line);
    expect(bundle).not.toMatch(/resolve\(\s*["'`]bcryptjs/);
  });
});

describe('what --web.config.file turns on, said at the start', () => {
  it('refuses an empty or null file in one line (exit 2), before the port is bound', async () => {
    for (const [name, text] of [
      ['empty.yml', ''],
      ['null.yml', 'null\n'],
    ]) {
      writeFileSync(file(name!), text!);
      const refused = await startMetrics(
        { address: { host: '127.0.0.1', port: 0 }, queryText: false, webConfigFile: file(name!) },
        undefined,
        () => undefined,
      ).then(
        async (m) => (await m.close(), null),
        (error: unknown) => error,
      );
      expect(refused, name).toBeInstanceOf(UserError);
      expect((refused as UserError).exitCode).toBe(2);
      expect((refused as Error).message).toMatch(/turns on neither TLS nor basic authentication/);
      expect((refused as Error).message).not.toContain('\n');
    }
  });

  it('warns in one line of basic authentication without TLS, and says nothing with TLS', async () => {
    const users = `basic_auth_users:\n  prometheus: ${bcrypt.hashSync('right horse', 4)}\n`;
    writeFileSync(file('plain-auth.yml'), users);
    writeFileSync(file('tls-auth.yml'), `tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n${users}`);
    for (const [name, warned] of [
      ['plain-auth.yml', true],
      ['tls-auth.yml', false],
    ] as const) {
      const lines: string[] = [];
      const m = await startMetrics(
        { address: { host: '127.0.0.1', port: 0 }, queryText: false, webConfigFile: file(name) },
        undefined,
        (l) => lines.push(l),
      );
      await m.close();
      expect(lines.filter((l) => l.includes('clear text')).length, name).toBe(warned ? 1 : 0);
      if (warned)
        expect(lines[0]).toBe(
          `warning: --web.config.file ${file(name)} has basic_auth_users without tls_server_config: every scrape sends the password in clear text (add tls_server_config, or keep /metrics on this host or behind a TLS proxy)`,
        );
    }
  });
});
