import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors.js';
import { clientConfig, parseKeywordValue, redact } from '../../src/storage/connection-string.js';

describe('connection string forms', () => {
  it('accepts URIs, key=value pairs and socket directories', () => {
    for (const dsn of [
      'postgresql://postgres@127.0.0.1:5432/postgres',
      'postgres://u:secret@db/app?sslmode=require',
      'host=127.0.0.1 port=5432 dbname=postgres',
      "host=/tmp dbname='my db' password='it\\'s'",
      '/var/run/postgresql',
      // libpq takes an empty value as the keyword's default
      'host=',
    ]) {
      expect(() => clientConfig(dsn), dsn).not.toThrow();
    }
  });

  it('refuses anything else with one line that names the forms, without the password', () => {
    for (const dsn of [
      'not a dsn',
      'localhost',
      'postgresql://u:pw@[bad/x',
      "password='pw@unterminated",
      'pasword=pw@x host=h',
      'host=a port=x password=pw@x',
    ]) {
      let error: unknown;
      try {
        clientConfig(dsn);
      } catch (e) {
        error = e;
      }
      expect(error, dsn).toBeInstanceOf(UserError);
      expect((error as Error).message).toMatch(/expected postgresql:\/\//);
      expect((error as Error).message).not.toContain('pw@');
      expect((error as Error).message).not.toContain('\n');
    }
  });
});

describe('key=value connection strings, as libpq reads them', () => {
  it('gives pg the host, port, database, user and password (pg alone read "host=..." as host "base")', () => {
    const config = clientConfig("host=/tmp  port = 5433 dbname='my db' user=u password='it\\'s a \\\\ secret'");
    expect(config).toMatchObject({ host: '/tmp', port: 5433, database: 'my db', user: 'u', password: "it's a \\ secret" });
    expect(clientConfig('host=127.0.0.1 dbname=postgres')).toMatchObject({ host: '127.0.0.1', database: 'postgres' });
    // A backslash takes the next character as it is in unquoted values too.
    expect(parseKeywordValue('password=a\\ b user=x')).toEqual(
      new Map([
        ['password', 'a b'],
        ['user', 'x'],
      ]),
    );
    expect(parseKeywordValue("password = '' user\t=\tx")).toEqual(
      new Map([
        ['password', ''],
        ['user', 'x'],
      ]),
    );
  });

  it('maps connect_timeout, keepalives and the TLS keywords', () => {
    expect(clientConfig('host=h connect_timeout=5').connectionTimeoutMillis).toBe(5000);
    expect(clientConfig('host=h connect_timeout=1').connectionTimeoutMillis).toBe(2000);
    expect(clientConfig('postgresql://h/db?connect_timeout=3').connectionTimeoutMillis).toBe(3000);
    expect(clientConfig('host=h sslmode=disable').ssl).toBe(false);
    expect(clientConfig('host=h sslmode=verify-full').ssl).toEqual({});
    expect(clientConfig('host=h keepalives=1 keepalives_idle=30')).toMatchObject({ keepAlive: true, keepAliveInitialDelayMillis: 30_000 });
  });

  it('refuses what pg could not honour, in one line naming the keyword and never a value', () => {
    const message = (dsn: string) => {
      try {
        clientConfig(dsn);
      } catch (error) {
        expect(error).toBeInstanceOf(UserError);
        return (error as Error).message;
      }
      throw new Error(`${dsn} was accepted`);
    };
    expect(message('host=a,b dbname=x')).toMatch(/several hosts/);
    expect(message('service=prod')).toMatch(/unsupported keyword "service"/);
    expect(message('host=h port=54x32')).toMatch(/port is not a port number/);
    expect(message("host=h password='s3cret")).toMatch(/unterminated quoted value of password/);
    expect(message("host=h password='s3cret")).not.toContain('s3cret');
    expect(message('host=h s3cret')).toMatch(/missing "=" after a keyword/);
    expect(message('host=h s3cret')).not.toContain('s3cret');
    // A socket directory takes a database name and nothing else: no key=value, no third word.
    for (const dsn of ['/run/pg password=s3cret', '/run/pg dbname=d password=s3cret', '/run/pg db s3cret', '/run/pg\tpassword=s3cret']) {
      expect(message(dsn), dsn).toMatch(/a socket directory and a database name, nothing more/);
      expect(message(dsn)).not.toContain('s3cret');
      expect(message(dsn)).not.toContain('\n');
    }
    expect(clientConfig('/run/pg  db')).toMatchObject({ host: '/run/pg', database: 'db' });
  });
});

describe('redact', () => {
  it('leaves a string without a password as it is', () => {
    for (const dsn of ['postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=2', 'host=h dbname=d', '/var/run/postgresql db']) {
      expect(redact(dsn)).toBe(dsn);
    }
  });

  it('hides the password of every form, hostile ones included', () => {
    const cases: Array<[string, string]> = [
      ['postgresql://u:s3cret@h:5432/db', 'postgresql://u:***@h:5432/db'],
      // the userinfo runs to the last @ of the authority: the password is s3cret@x
      ['postgresql://user:s3cret@x@host/db', 'postgresql://user:***@host/db'],
      ['postgres://u:s3cret@h/db?sslmode=require&password=s3cret2#f', 'postgres://u:***@h/db?sslmode=require&password=***#f'],
      ['postgresql://u@h/db?pass%77ord=s3cret', 'postgresql://u@h/db?pass%77ord=***'],
      ['postgresql://u:s3c:ret@h', 'postgresql://u:***@h'],
      ['postgresql://u:s3cret@[::1]:5/db', 'postgresql://u:***@[::1]:5/db'],
      ['host=h password=s3cret dbname=d', 'host=h password=*** dbname=d'],
      ['host=h password = s3cret dbname=d', 'host=h password=*** dbname=d'],
      ["host=h password='s3 cret' dbname=d", 'host=h password=*** dbname=d'],
      ["password='it\\'s s3cret' host=h", 'password=*** host=h'],
      ['password=s3\\ cret host=h', 'password=*** host=h'],
      ["host='a b' password=s3cret", "host='a b' password=***"],
      ["host=h password='s3cret", '(not shown: it cannot be parsed)'],
      ['s3cret host=h', '(not shown: it cannot be parsed)'],
      ['pasword=s3cret host=h', 'pasword=*** host=h'],
      ['/run/pg password=s3cret', '(not shown: it cannot be parsed)'],
      ['/run/pg db s3cret', '(not shown: it cannot be parsed)'],
    ];
    for (const [dsn, shown] of cases) {
      expect(redact(dsn), dsn).toBe(shown);
      expect(redact(dsn)).not.toMatch(/s3/);
    }
  });
});

describe('passwords from the environment: PGPASSWORD, then the password file', () => {
  let dir: string;
  let saved: NodeJS.ProcessEnv;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-passfile-'));
    saved = { ...process.env };
    delete process.env.PGPASSWORD;
  });
  afterEach(() => {
    process.env = saved;
    rmSync(dir, { recursive: true, force: true });
  });

  /** What pg gets when the server asks: the function is called with the parameters pg resolved. */
  const ask = (dsn: string, params: { host?: string; port?: number; database?: string; user?: string }) => {
    const { password } = clientConfig(dsn);
    expect(typeof password).toBe('function');
    return (password as unknown as (p: typeof params) => string | undefined)(params);
  };

  it('reads the first matching line of a private password file (passfile= or PGPASSFILE)', () => {
    const file = join(dir, 'pgpass');
    writeFileSync(file, '# comment\nother:5432:*:u:wrong\nh:5433:db:u:first\\:part\\\\x\n*:*:*:*:fallback\n', { mode: 0o600 });
    expect(ask(`host=h passfile=${file}`, { host: 'h', port: 5433, database: 'db', user: 'u' })).toBe('first:part\\x');
    expect(ask(`host=h passfile=${file}`, { host: 'h', port: 5432, database: 'db', user: 'u' })).toBe('fallback');
    process.env.PGPASSFILE = file;
    expect(ask('postgresql://u@h:5433/db', { host: 'h', port: 5433, database: 'db', user: 'u' })).toBe('first:part\\x');
    // PGPASSWORD comes before the file, as in libpq.
    process.env.PGPASSWORD = 'from-env';
    expect(ask('postgresql://u@h:5433/db', { host: 'h', port: 5433, database: 'db', user: 'u' })).toBe('from-env');
  });

  it('ignores a password file others can read, as libpq does', () => {
    const file = join(dir, 'pgpass');
    writeFileSync(file, '*:*:*:*:leaked\n', { mode: 0o600 });
    chmodSync(file, 0o644);
    const warnings: string[] = [];
    const listener = (w: Error) => warnings.push(w.message);
    process.on('warning', listener);
    try {
      expect(ask(`host=h passfile=${file}`, { host: 'h', port: 5432, database: 'd', user: 'u' })).toBeUndefined();
    } finally {
      process.off('warning', listener);
    }
  });

  it('keeps a password given in the string', () => {
    expect(clientConfig('postgresql://u:given@h/db').password).toBe('given');
    expect(clientConfig('host=h password=given').password).toBe('given');
  });
});
