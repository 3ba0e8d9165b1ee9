import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseCli, type CliOptions } from '../../src/cli/parse-args.js';
import { UserError } from '../../src/errors.js';

/* --dsn-file and --sink-file: the connection string (and its password) out of the command line. */
let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-dsn-file-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, text: string, mode = 0o600) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
};
const error = (argv: string[]) => {
  try {
    parseCli(argv);
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    expect((e as Error).message).not.toContain('\n');
    return (e as Error).message;
  }
  throw new Error(`${argv.join(' ')} was accepted`);
};

describe('--dsn-file and --sink-file', () => {
  it('read the connection string from a file, either form, with its line end', () => {
    const dsn = file('dsn', 'postgresql://collector:s3cret@db:5432/postgres\n');
    const sink = file('sink', "host=central dbname=metrics\n  user=writer password='s3 cret'\n");
    const options = parseCli(['run', '--dsn-file', dsn, '--sink-file', sink]) as CliOptions;
    expect(options.dsn).toBe('postgresql://collector:s3cret@db:5432/postgres');
    expect(options.sink).toBe("host=central dbname=metrics\n  user=writer password='s3 cret'");
  });

  it('refuse a file with a password that group or others can read, as libpq refuses such a .pgpass', () => {
    const loose = file('dsn', 'postgresql://u:s3cret@db/postgres', 0o640);
    expect(error(['run', '--dsn-file', loose])).toBe(
      `--dsn-file ${loose} holds a password and group or others can read it (mode 640): chmod 600 it`,
    );
    // Without a password (it comes from PGPASSFILE or PGPASSWORD) the mode does not matter.
    const open = file('open', 'host=db dbname=postgres user=collector', 0o644);
    expect((parseCli(['run', '--dsn-file', open]) as CliOptions).dsn).toBe('host=db dbname=postgres user=collector');
  });

  it('say in one line what is wrong, never showing a password', () => {
    expect(error(['run', '--dsn', 'host=x', '--dsn-file', '/nonexistent'])).toBe('--dsn and --dsn-file: give one of them');
    expect(error(['run', '--dsn-file', join(dir, 'missing')])).toBe(`--dsn-file ${join(dir, 'missing')}: cannot read it (ENOENT)`);
    expect(error(['run', '--dsn-file', file('empty', '\n')])).toMatch(/the file is empty/);
    const bad = error(['run', '--sink-file', file('bad', "host=db password='s3cret")]);
    expect(bad).toMatch(/^--sink-file .*: .* is not a connection string \(unterminated quoted value of password\)/);
    expect(bad).not.toContain('s3cret');
    expect(error(['migrate', '--sink-file', file('sink', 'host=db')])).toBe('--sink is an option of run and check');
  });

  it('refuse a password on the command line (--dsn, --sink), in one line that repeats none of it, with where to put it', () => {
    const forms = [
      'postgresql://collector:s3cret@db:5432/postgres',
      "host=db user=collector password='s3 cret'",
      'host=db password=s3cret',
      'postgresql://collector@db/postgres?password=s3cret',
    ];
    for (const dsn of forms) {
      for (const [flag, argv] of [
        ['--dsn', ['report', '--dsn', dsn]],
        ['--dsn', ['run', '--dsn', dsn]],
        ['--sink', ['run', '--sink', dsn]],
      ] as const) {
        const message = error([...argv]);
        expect(message).toBe(
          `${flag} holds a password, which every local user can read on the command line: use ${flag}-file (mode 0600), PGPASSWORD or a password file (~/.pgpass, PGPASSFILE) instead`,
        );
        expect(message).not.toMatch(/s3 ?cret/);
      }
    }
    // Without one (PGPASSWORD or a password file supplies it), or with an empty one: taken.
    expect(parseCli(['run', '--dsn', 'postgresql://collector@db/postgres']) as CliOptions).toMatchObject({
      dsn: 'postgresql://collector@db/postgres',
    });
    expect(parseCli(['run', '--dsn', "host=db password=''"]) as CliOptions).toMatchObject({ dsn: "host=db password=''" });
  });

  it('check --dsn before anything starts', () => {
    expect(error(['run', '--dsn', 'not a dsn'])).toMatch(/^--dsn .* is not a connection string/);
    expect(error(['run', '--dsn', 'host=h service=prod'])).toMatch(/unsupported keyword "service"/);
  });
});
