import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import bcrypt from 'bcryptjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mayHoldPassword } from '../../src/password-text.js';
import { BasicAuth, readWebConfig } from '../../src/exporters/prometheus/web-config.js';
import { UserError } from '../../src/errors.js';

let dir: string;
const hash = bcrypt.hashSync('right horse', 4);
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-web-config-'));
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      join(dir, 'k.pem'),
      '-out',
      join(dir, 'c.pem'),
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const config = (name: string, text: string) => {
  writeFileSync(join(dir, name), text);
  return join(dir, name);
};
const refusal = (path: string) => {
  try {
    readWebConfig(path);
  } catch (error) {
    expect(error).toBeInstanceOf(UserError);
    expect((error as Error).message).not.toContain('\n');
    return (error as Error).message;
  }
  throw new Error('accepted');
};

describe('--web.config.file (exporter-toolkit format)', () => {
  it('reads TLS files relative to itself, and bcrypt users ($2y$ from htpasswd too)', () => {
    const path = config(
      'web.yml',
      `tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS12\nbasic_auth_users:\n  prometheus: ${hash}\n  other: '${hash.replace('$2b$', '$2y$')}'\n`,
    );
    const web = readWebConfig(path);
    expect(web.tls?.cert.toString()).toMatch(/BEGIN CERTIFICATE/);
    expect(web.tls).toMatchObject({ requestCert: false, rejectUnauthorized: false, minVersion: 'TLSv1.2' });
    expect([...web.users.keys()]).toEqual(['prometheus', 'other']);
    expect(readWebConfig(config('empty.yml', ''))).toEqual({ tls: null, users: new Map() });
  });

  it('refuses what would leave /metrics open by mistake, in one line', () => {
    expect(refusal(config('typo.yml', `basic_auth_user:\n  p: ${hash}\n`))).toMatch(/unknown key "basic_auth_user"/);
    expect(refusal(config('plain.yml', 'basic_auth_users:\n  p: secret\n'))).toMatch(/basic_auth_users\."p": not a bcrypt hash/);
    // Names from the file are shown as JSON strings: a newline in one cannot break the line.
    expect(refusal(config('newline.yml', 'basic_auth_users:\n  "p\\nforged: line": secret\n'))).toContain(
      'basic_auth_users."p\\nforged: line": not a bcrypt hash',
    );
    expect(refusal(config('newkey.yml', 'tls_server_config:\n  "x\\ny": 1\n'))).toContain('unknown key tls_server_config."x\\ny"');
    expect(refusal(config('half.yml', 'tls_server_config:\n  cert_file: c.pem\n'))).toMatch(/needs cert_file and key_file/);
    expect(refusal(config('gone.yml', 'tls_server_config:\n  cert_file: c.pem\n  key_file: nope.pem\n'))).toMatch(
      /key_file ".*nope\.pem": cannot read it \(ENOENT\)/,
    );
    expect(
      refusal(
        config('mtls.yml', 'tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_auth_type: RequireAndVerifyClientCert\n'),
      ),
    ).toMatch(/needs client_ca_file/);
    expect(refusal(config('bad.yml', 'a: [\n'))).toMatch(/not YAML/);
    expect(refusal(join(dir, 'missing.yml'))).toMatch(/cannot read it \(ENOENT\)/);
  });
});

describe('basic authentication', () => {
  const header = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

  it('lets the right password in and nothing else', async () => {
    const auth = new BasicAuth(new Map([['prometheus', hash]]));
    expect(await auth.allows(header('prometheus', 'right horse'))).toBe(true);
    // remembered: the same pair again, without bcrypt
    expect(await auth.allows(header('prometheus', 'right horse'))).toBe(true);
    for (const wrong of [
      header('prometheus', 'wrong horse'),
      header('prometheus', 'right horse '),
      header('root', 'right horse'),
      header('prometheus', ''),
      undefined,
      'Bearer x',
      'Basic !!!',
    ]) {
      expect(await auth.allows(wrong), String(wrong)).toBe(false);
    }
    expect(await new BasicAuth(new Map()).allows(undefined)).toBe(true);
  });

  it('runs at most two bcrypt checks at once; a remembered scraper still gets in during a flood', async () => {
    const slow = bcrypt.hashSync('right horse', 10);
    const auth = new BasicAuth(new Map([['prometheus', slow]]));
    expect(await auth.allows(header('prometheus', 'right horse'))).toBe(true);
    const flood = Array.from({ length: 6 }, () => auth.allows(header('prometheus', 'guess')));
    // While two guesses are being checked, the remembered pair needs no check.
    expect(await auth.allows(header('prometheus', 'right horse'))).toBe(true);
    expect(await Promise.all(flood)).toEqual([false, false, false, false, false, false]);
    // Not yet remembered: while two checks run, even the right pair is not checked ('busy', not
    // 'refused': the exporter answers 503 with Retry-After, not 401), and gets in once they are done.
    const fresh = new BasicAuth(new Map([['prometheus', slow]]));
    const busy = [fresh.check(header('prometheus', 'a')), fresh.check(header('prometheus', 'b'))];
    expect(await fresh.check(header('prometheus', 'right horse'))).toBe('busy');
    expect(await fresh.allows(header('prometheus', 'right horse'))).toBe(false);
    expect(await Promise.all(busy)).toEqual(['refused', 'refused']);
    expect(await fresh.check(header('prometheus', 'right horse'))).toBe('allowed');
  });
});

describe('query texts that may hold a password', () => {
  it('are found whatever the case, spacing or comments', () => {
    for (const text of [
      "ALTER ROLE app PASSWORD 'hunter2'",
      "alter user app with encrypted password 'SCRAM-SHA-256$4096:...'",
      "CREATE ROLE x LOGIN /* note */ PaSsWoRd 'p'",
      "ALTER USER postgres PASSWORD 'md5abc'", // what psql's \\password sends
      "CREATE USER MAPPING FOR app SERVER s OPTIONS (user 'u', password 'p')",
      "CREATE SUBSCRIPTION s CONNECTION 'host=h user=u passwd=p' PUBLICATION p",
      "SELECT dblink_connect('postgresql://u:secret@h/db')",
    ]) {
      expect(mayHoldPassword(text), text).toBe(true);
    }
    for (const text of ['SELECT 1', 'ALTER ROLE app SET work_mem = $1', "SELECT * FROM t WHERE url = 'https://example.org/x'"]) {
      expect(mayHoldPassword(text), text).toBe(false);
    }
  });
});
