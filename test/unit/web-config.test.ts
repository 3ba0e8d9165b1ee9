import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
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
  });

  it('refuses a file that turns on nothing (empty, null, {}, empty keys): it would serve /metrics as no file does', () => {
    for (const [name, text] of [
      ['empty.yml', ''],
      ['blank.yml', '\n# nothing yet\n'],
      ['null.yml', 'null\n'],
      ['tilde.yml', '~\n'],
      ['braces.yml', '{}\n'],
      ['null-keys.yml', 'tls_server_config:\nbasic_auth_users:\n'],
      ['empty-users.yml', 'basic_auth_users: {}\n'],
    ]) {
      expect(refusal(config(name!, text!)), name).toBe(
        `--web.config.file ${join(dir, name!)}: turns on neither TLS nor basic authentication (give tls_server_config or basic_auth_users, or no --web.config.file)`,
      );
    }
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
    try {
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
    } finally {
      await auth.close();
    }
    expect(await new BasicAuth(new Map()).allows(undefined)).toBe(true);
  });

  it('checks on a thread of its own as bcryptjs does: $2a$, $2b$, $2y$, long and non-ASCII passwords', async () => {
    const cases = [
      ['right horse', bcrypt.hashSync('right horse', 4)],
      ['ünïcödé ✓ 密码', bcrypt.hashSync('ünïcödé ✓ 密码', 4)],
      ['x'.repeat(100), bcrypt.hashSync('x'.repeat(100), 4)],
      ['', bcrypt.hashSync('', 4)],
      ['right horse', bcrypt.hashSync('right horse', 4).replace(/^\$2b\$/, '$2a$')],
      ['right horse', bcrypt.hashSync('right horse', 4).replace(/^\$2b\$/, '$2y$')],
    ] as const;
    for (const [password, known] of cases) {
      const auth = new BasicAuth(new Map([['u', known]]));
      try {
        for (const tried of [`${password}!`, password.slice(0, -1), 'x'.repeat(72), password])
          expect(await auth.allows(header('u', tried)), `${tried} against ${known}`).toBe(bcrypt.compareSync(tried, known));
      } finally {
        await auth.close();
      }
    }
  });

  it('keeps the main thread free while it checks: its event loop idle most of the time during eight checks at cost 10', async () => {
    const auth = new BasicAuth(new Map([['prometheus', bcrypt.hashSync('right horse', 10)]]));
    // Utilization, not timer delays: a loaded machine delays timers of an idle loop too.
    const before = performance.eventLoopUtilization();
    try {
      const sources = ['a', 'b', 'c', 'd'];
      const checks = sources.flatMap((s) => [auth.check(header('prometheus', 'guess'), s), auth.check(header('prometheus', 'guess 2'), s)]);
      expect(await Promise.all(checks)).toEqual(new Array(8).fill('refused'));
      // bcryptjs on the main thread: busy through every check (~90 ms each here).
      expect(performance.eventLoopUtilization(before).utilization).toBeLessThan(0.3);
    } finally {
      await auth.close();
    }
  });

  it("takes sources in turn: a source's guesses cannot keep another's first login out", async () => {
    const auth = new BasicAuth(new Map([['prometheus', bcrypt.hashSync('right horse', 8)]]));
    try {
      // Two guessers with their budget full (two checks each, waiting or running) ...
      const guesses = ['guesser 1', 'guesser 2'].flatMap((s) => [
        auth.check(header('prometheus', 'a'), s),
        auth.check(header('prometheus', 'b'), s),
      ]);
      // ... a third from either is not checked (503, not 401) ...
      expect(await auth.check(header('prometheus', 'c'), 'guesser 1')).toBe('busy');
      // ... and a scraper not remembered yet is checked in its turn, before the guessers' second checks.
      const order: string[] = [];
      const scraper = auth.check(header('prometheus', 'right horse'), 'scraper').then((v) => (order.push('scraper'), v));
      for (const [i, g] of guesses.entries()) void g.then(() => order.push(`guess ${i}`));
      expect(await scraper).toBe('allowed');
      expect(await Promise.all(guesses)).toEqual(['refused', 'refused', 'refused', 'refused']);
      // The check running when it came (guesser 1's first), then one of each other source, then the scraper.
      expect(order.indexOf('scraper')).toBeLessThanOrEqual(3);
      // Remembered from then on: no check, whatever waits.
      const more = ['guesser 1', 'guesser 2'].flatMap((s) => [
        auth.check(header('prometheus', 'd'), s),
        auth.check(header('prometheus', 'e'), s),
      ]);
      expect(await auth.check(header('prometheus', 'right horse'), 'scraper')).toBe('allowed');
      await Promise.all(more);
    } finally {
      await auth.close();
    }
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
