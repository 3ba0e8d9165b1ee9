import { lchownSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { UserError } from '../../src/errors.js';
import { WITHHELD_TEXT } from '../../src/password-text.js';
import { reportCommand } from '../../src/report/report-command.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { topCommand } from '../../src/top/top-command.js';
import { readTop, TOP_SQL } from '../../src/top/top-read.js';
import { clientConfig } from '../../src/storage/connection-string.js';
import { pinnedConfig } from '../../src/storage/pinned-session.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';
import { OPERATOR_NAMES, operatorNamesIn, plantedOperators, plantOperators } from '../support/planted-operators.js';

/*
 * What `report` and `top` show a reader, and where `report --html` writes, with hostile roles
 * about: PostgreSQL 14, where PUBLIC may create in `public` (the default then, kept by clusters
 * upgraded from it). A statement whose text holds a password burns CPU so it has figures; its
 * text is then missing from bpf_stats.query_texts (not copied yet: the report falls back to
 * pg_stat_statements') or held there in full (as a release from before the password test wrote
 * it, e.g. a sink's older node). The reader is a pg_monitor role with the default search_path.
 * Ground truth: pg_stat_statements holds the password in the text, and the planted operators
 * run in a session that does not pin its path.
 */
const SECRET = 'hunter2-Kq7ZxW';
/** A statement with figures (about 0.3 s on CPU) whose text holds a password: pg_stat_statements keeps a utility statement's text as sent. */
const SETS_PASSWORD = `DO $$ BEGIN PERFORM count(*) FROM generate_series(1, 3000000); PERFORM 'host=db password=${SECRET}'; END $$`;

let cluster: ThrowawayCluster;
let sidecar: Sidecar;
let admin: pg.Client;
let dir: string;
/** The statement's key in bpf_stats.query_texts. */
let key: { userid: number; dbid: number; toplevel: boolean; queryid: string };

const viewerDsn = () => cluster.connectionString().replace('postgres@', 'viewer@');

async function report(html?: string): Promise<string[]> {
  const lines: string[] = [];
  await reportCommand(viewerDsn(), { limit: 100, ...(html && { html }) }, (line) => lines.push(line));
  return lines;
}

async function top(): Promise<string> {
  let screen = '';
  const out = { isTTY: false, write: (text: string) => ((screen += text), true) } as unknown as NodeJS.WriteStream;
  expect(await topCommand({ dsn: viewerDsn(), intervalMs: 10, iterations: 1, sort: 'total' }, out)).toBe(0);
  return screen;
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start({ pgBin: embeddedPostgresBin(14) });
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE ROLE mallory LOGIN; CREATE ROLE viewer LOGIN IN ROLE pg_monitor');
  sidecar = await Sidecar.start({
    connectionString: cluster.connectionString(),
    intervalMs: 3_600_000,
    historyIntervalMs: 0,
    log: () => undefined,
  });
  await admin.query(SETS_PASSWORD);
  await admin.query("ALTER ROLE mallory PASSWORD 'hunter2-Kq7ZxW'");
  await sidecar.flush();
  const { rows } = await admin.query(
    `SELECT s.userid, s.dbid, s.toplevel, s.queryid::text AS queryid FROM pg_stat_statements s WHERE s.query LIKE 'DO $$ BEGIN PERFORM count(*)%'`,
  );
  expect(rows).toHaveLength(1);
  key = rows[0];
  dir = mkdtempSync(join(tmpdir(), 'pgbpf-hostile-readers-'));
}, 120_000);

afterAll(async () => {
  await sidecar?.stop();
  await admin?.end();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('a statement that sets a password', () => {
  it('is what the test meant: pg_stat_statements holds the password, the collector has figures for it and stored the placeholder', async () => {
    const pgss = await admin.query('SELECT query FROM pg_stat_statements WHERE queryid = $1', [key.queryid]);
    expect(pgss.rows[0].query).toContain(SECRET);
    const stored = await admin.query('SELECT query FROM bpf_stats.query_texts WHERE queryid = $1', [key.queryid]);
    expect(stored.rows.map((r) => r.query)).toEqual([WITHHELD_TEXT]);
    const figures = await admin.query('SELECT sum(total_time_ms) AS ms FROM bpf_stats.query_stats_history WHERE queryid = $1', [
      key.queryid,
    ]);
    expect(Number(figures.rows[0].ms)).toBeGreaterThan(0);
  });

  it('report (text and HTML) withholds it where only pg_stat_statements has its text', async () => {
    await admin.query('DELETE FROM bpf_stats.query_texts WHERE queryid = $1', [key.queryid]);
    const text = await report();
    const line = text.find((l) => l.startsWith(`${key.queryid} `));
    expect(line, text.join('\n')).toContain(WITHHELD_TEXT);
    expect(text.join('\n')).not.toContain(SECRET);
    const html = join(dir, 'withheld.html');
    await report(html);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain(key.queryid);
    expect(page).not.toContain(SECRET);
  });

  it('report, top and the views withhold it where bpf_stats.query_texts holds it in full (a release before the password test wrote it)', async () => {
    await admin.query(
      `INSERT INTO bpf_stats.query_texts (node, userid, dbid, toplevel, queryid, query)
       SELECT h.node, s.userid, s.dbid, s.toplevel, s.queryid, s.query FROM pg_stat_statements s, bpf_stats.health h WHERE s.queryid = $1`,
      [key.queryid],
    );
    // Seen in the last 15 s, so top lists it.
    await admin.query(SETS_PASSWORD);
    await sidecar.flush();
    const text = await report();
    expect(text.find((l) => l.startsWith(`${key.queryid} `))).toContain(WITHHELD_TEXT);
    expect(text.join('\n')).not.toContain(SECRET);
    const html = join(dir, 'older-row.html');
    await report(html);
    expect(readFileSync(html, 'utf8')).not.toContain(SECRET);
    const screen = await top();
    expect(screen).not.toContain(SECRET);
    const viewer = new pg.Client(pinnedConfig(clientConfig(viewerDsn())));
    await viewer.connect();
    try {
      const read = await readTop(viewer);
      const row = read.queries.find((q) => q.key.endsWith(`/${key.queryid}`));
      expect(row?.text, JSON.stringify(read.queries)).toBe(WITHHELD_TEXT);
    } finally {
      await viewer.end();
    }
  });
});

describe('report --html', () => {
  it('refuses a symbolic link another user planted at the name, in one line, and leaves its target alone', async () => {
    // Not a sticky world-writable directory: fs.protected_symlinks does not apply here, as it
    // does not in any directory the planter may write (a shared reports directory, a home).
    const victim = join(dir, 'root-only');
    writeFileSync(victim, 'precious\n', { mode: 0o600 });
    const planted = join(dir, 'planted.html');
    symlinkSync(victim, planted);
    lchownSync(planted, 65534, 65534); // nobody's link
    const refused = await report(planted).then(
      () => null,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(UserError);
    expect((refused as UserError).exitCode).toBe(2);
    expect((refused as Error).message).toBe(
      `--html ${planted} is a symbolic link: refusing to write through it (remove it, or name another file)`,
    );
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    // Nothing left behind (the temporary file is made only after the check).
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('replaces a file that is there, whole, and leaves no temporary file', async () => {
    const target = join(dir, 'again.html');
    writeFileSync(target, 'old');
    await report(target);
    expect(readFileSync(target, 'utf8')).toMatch(/^<!DOCTYPE html>/i);
    expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });
});

describe('operators a plain role planted in public', () => {
  it('run in neither report (text, HTML) nor top, as a pg_monitor role whose search_path is the default', async () => {
    const mallory = new pg.Client(cluster.connectionString().replace('postgres@', 'mallory@'));
    await mallory.connect();
    const viewer = new pg.Client(viewerDsn());
    await viewer.connect();
    try {
      // PostgreSQL 14: PUBLIC may create in public.
      expect((await mallory.query("SELECT has_schema_privilege('public', 'CREATE') AS ok")).rows[0].ok).toBe(true);
      expect((await viewer.query('SHOW search_path')).rows[0].search_path).toBe('"$user", public');
      const names = new Set([...OPERATOR_NAMES, ...operatorNamesIn(TOP_SQL)]);
      const made = await plantOperators(mallory, 'public', names);
      expect(made).toBeGreaterThan(1000);
      console.log(`planted ${made} operators: ${(await plantedOperators(viewer, 'public')).length} in public`);
      // The trap works: a session that does not pin its path runs one (float8 / integer has no catalog operator of its own).
      await expect(viewer.query('SELECT 1.5::float8 / 2')).rejects.toThrow(
        /planted operator public\.\/\(double precision, integer\) ran as viewer/,
      );
      await expect(viewer.query("SELECT 'a'::text || 1::bigint")).rejects.toThrow(/planted operator/);

      const text = await report();
      expect(text.some((l) => l.startsWith(`${key.queryid} `))).toBe(true);
      await report(join(dir, 'planted-operators.html'));
      await top();
    } finally {
      await mallory.end();
      await viewer.end();
    }
  }, 120_000);
});
