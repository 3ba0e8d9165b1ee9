import { execFileSync } from 'node:child_process';
import bcrypt from 'bcryptjs';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrometheusExporter } from '../../src/exporters/prometheus/prometheus-exporter.js';
import { readWebConfig } from '../../src/exporters/prometheus/web-config.js';

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

describe('basic authentication while every bcrypt check is in use', () => {
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
      // Two guesses take both checks (cost 12: long enough to still run when the third arrives).
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
