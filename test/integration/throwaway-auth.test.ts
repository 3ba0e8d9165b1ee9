import { execFile } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';

/*
 * The throwaway clusters of the demo, the tests and the benches, entered by another local user
 * (nobody): with `initdb -A trust` on 127.0.0.1 any local user was their superuser (and could
 * run COPY ... TO PROGRAM as the cluster's OS user). Now TCP asks for the cluster's random
 * password and the socket is in a directory nobody can enter. The controls show that each
 * refusal is authentication (or the directory), not an unreachable or stopped server.
 */
const run = promisify(execFile);
let cluster: ThrowawayCluster;

/** psql as `nobody`, with no password from us unless given; stdout and stderr, and whether it worked. */
async function psqlAsNobody(args: string[], env: Record<string, string> = {}): Promise<{ ok: boolean; out: string }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PG')));
  try {
    const { stdout } = await run('runuser', ['-u', 'nobody', '--', join(cluster.pgBin, 'psql'), '-X', '-At', '-w', ...args], {
      cwd: '/',
      env: { ...clean, ...env },
      timeout: 30_000,
    });
    return { ok: true, out: stdout.trim() };
  } catch (error) {
    return { ok: false, out: String((error as { stderr?: string }).stderr ?? error).trim() };
  }
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
});
afterAll(async () => {
  await cluster?.stop();
});

describe('a throwaway cluster, entered by another local user', () => {
  it('refuses the superuser over TCP without the password: authentication, not reachability', async () => {
    const tcp = ['-h', '127.0.0.1', '-p', String(cluster.port), '-U', 'postgres', '-d', 'postgres', '-c', 'SELECT 1'];
    const none = await psqlAsNobody(tcp);
    expect(none.ok).toBe(false);
    expect(none.out).toMatch(/fe_sendauth: no password supplied/);
    const wrong = await psqlAsNobody(tcp, { PGPASSWORD: 'guessed' });
    expect(wrong.ok).toBe(false);
    expect(wrong.out).toMatch(/password authentication failed for user "postgres"/);
    // Control: the same user, address and port with the password get in, so the server was
    // there to answer and the refusals above are the password alone (under `trust` the first
    // command got in just like this one).
    const right = await psqlAsNobody(tcp, { PGPASSWORD: cluster.password });
    expect(right).toEqual({ ok: true, out: '1' });
  });

  it('keeps its socket where nobody can reach it', async () => {
    const socket = await psqlAsNobody([
      '-h',
      cluster.baseDir,
      '-p',
      String(cluster.port),
      '-U',
      'postgres',
      '-d',
      'postgres',
      '-c',
      'SELECT 1',
    ]);
    expect(socket.ok).toBe(false);
    expect(socket.out).toMatch(/Permission denied/);
    expect(statSync(cluster.baseDir).mode & 0o777).toBe(0o700);
  });

  it('trusts no host line, and its callers still connect as before', async () => {
    const admin = new pg.Client(cluster.connectionString());
    await admin.connect();
    try {
      const { rows } = await admin.query<{ type: string; auth_method: string }>(
        'SELECT DISTINCT type, auth_method FROM pg_hba_file_rules ORDER BY 1, 2',
      );
      expect(rows).toEqual([
        { type: 'host', auth_method: 'scram-sha-256' },
        { type: 'local', auth_method: 'trust' },
      ]);
      // A role a test creates logs in through the socket without a password, as before.
      await admin.query('CREATE ROLE throwaway_reader LOGIN');
      const reader = new pg.Client(cluster.connectionString().replace('postgres@', 'throwaway_reader@'));
      await reader.connect();
      expect((await reader.query('SELECT current_user AS u')).rows[0].u).toBe('throwaway_reader');
      await reader.end();
      // Over TCP, a role without a password cannot log in at all.
      const tcp = new pg.Client({ host: '127.0.0.1', port: cluster.port, user: 'throwaway_reader', database: 'postgres', password: 'x' });
      await expect(tcp.connect()).rejects.toThrow(/password authentication failed/);
    } finally {
      await admin.end();
    }
    // The cluster's binaries get the password through the environment.
    const { stdout } = await cluster.exec('psql', [
      '-X',
      '-At',
      '-h',
      '127.0.0.1',
      '-p',
      String(cluster.port),
      '-U',
      'postgres',
      '-c',
      'SELECT 2',
      'postgres',
    ]);
    expect(stdout.trim()).toBe('2');
  });
});
