import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors.js';
import { checkConnectionString } from '../../src/storage/connect.js';

describe('checkConnectionString', () => {
  it('accepts URIs, key=value pairs and socket directories', () => {
    for (const dsn of [
      'postgresql://postgres@127.0.0.1:5432/postgres',
      'postgres://u:secret@db/app?sslmode=require',
      'host=127.0.0.1 port=5432 dbname=postgres',
      "host=/tmp dbname='my db' password='it\\'s'",
      '/var/run/postgresql',
    ]) {
      expect(() => checkConnectionString(dsn), dsn).not.toThrow();
    }
  });

  it('refuses anything else with one line that names the forms, without the password', () => {
    for (const dsn of ['not a dsn', 'localhost', 'host=', 'postgresql://u:pw@[bad/x']) {
      let error: unknown;
      try {
        checkConnectionString(dsn);
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
