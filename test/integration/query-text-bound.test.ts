import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { cliPath } from '../../src/package-root.js';

/*
 * A plain login role puts statements with 40 MB comments into pg_stat_statements (it keeps
 * every text whole). The collector runs as the package's bin runs it (its heap capped at
 * 160 MB, src/cli/launcher.ts): it must read each text cut to 1024 characters and stay up,
 * also after a restart, when tiny statements with the same query ids make it look the same
 * huge texts up again.
 */
const cli = cliPath();
const TEXT_MAX = 1024;
const COMMENT_BYTES = 40 * 1024 * 1024;
/** Three statements with three query ids (aliases and constants do not change one). */
const STATEMENTS = ['SELECT 1 AS huge_0', 'SELECT 1, 2 AS huge_1', 'SELECT 1, 2, 3 AS huge_2'];

let cluster: ThrowawayCluster;
let admin: pg.Client;
const children: ChildProcess[] = [];

interface Collector {
  child: ChildProcess;
  exited: Promise<number | null>;
  stderr: () => string;
}

function startCollector(): Collector {
  // The bin's own V8 flags (src/cli/launcher.ts), so the heap limit is the one users run with.
  const child = spawn(
    process.execPath,
    ['--max-old-space-size=160', '--max-semi-space-size=4', cli, 'run', '--dsn', cluster.connectionString(), '--interval', '200ms'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))));
  return { child, exited, stderr: () => stderr };
}

async function until(what: string, check: () => Promise<boolean>, collector: Collector, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  let gone = false;
  void collector.exited.then(() => (gone = true));
  for (;;) {
    if (gone) throw new Error(`the collector exited while waiting for ${what}:\n${collector.stderr().slice(-2000)}`);
    if (await check()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}:\n${collector.stderr().slice(-2000)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Peak resident set of a process, in MB (VmHWM). */
function peakRssMb(pid: number): number {
  const line = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))!;
  return Number(line[1]) / 1024;
}

async function asPlain(statements: string[]): Promise<void> {
  const client = new pg.Client(cluster.connectionString().replace('postgres@', 'plain@'));
  await client.connect();
  try {
    for (const statement of statements) await client.query(statement);
  } finally {
    await client.end();
  }
}

/** The plain role's texts as bpf_stats.query_texts holds them, by query id. */
async function storedTexts(): Promise<Map<string, number>> {
  const { rows } = await admin.query<{ queryid: string; len: number }>(
    "SELECT queryid::text, length(query) AS len FROM bpf_stats.query_texts WHERE userid = 'plain'::regrole AND query LIKE 'SELECT % AS huge_%'",
  );
  return new Map(rows.map((r) => [r.queryid, r.len]));
}

beforeAll(async () => {
  cluster = await ThrowawayCluster.start();
  admin = new pg.Client(cluster.connectionString());
  await admin.connect();
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await admin.query('CREATE ROLE plain LOGIN');
}, 120_000);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await admin?.end();
  await cluster?.stop();
});

describe('query texts another role wrote', () => {
  it('are read cut to 1024 characters: three 40 MB statements, and tiny ones with their query ids after a restart, leave the collector up', async () => {
    const first = startCollector();
    await until(
      'the first flush',
      async () =>
        (await admin.query('SELECT 1 FROM bpf_stats.health WHERE last_flush_at IS NOT NULL').catch(() => ({ rows: [] }))).rows.length > 0,
      first,
    );

    const comment = `/* ${'x'.repeat(COMMENT_BYTES)} */`;
    await asPlain(STATEMENTS.map((statement) => `${statement} ${comment}`));
    const { rows: held } = await admin.query<{ queryid: string; len: number }>(
      "SELECT queryid::text, length(query) AS len FROM pg_stat_statements WHERE userid = 'plain'::regrole AND query LIKE 'SELECT % AS huge_%'",
    );
    // pg_stat_statements holds each text whole.
    expect(held.map((r) => r.len)).toEqual([0, 1, 2].map(() => expect.any(Number)));
    for (const row of held) expect(row.len).toBeGreaterThan(COMMENT_BYTES);
    const ids = held.map((r) => r.queryid).sort();

    await until('the three texts in bpf_stats.query_texts', async () => (await storedTexts()).size === 3, first);
    const stored = await storedTexts();
    expect([...stored.keys()].sort()).toEqual(ids);
    for (const len of stored.values()) expect(len).toBe(TEXT_MAX);
    // What is stored is the text's beginning, as pg_stat_statements has it.
    const { rows: same } = await admin.query<{ same: boolean }>(
      `SELECT bool_and(t.query = left(s.query, ${TEXT_MAX})) AS same FROM bpf_stats.query_texts t
         JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid) WHERE t.userid = 'plain'::regrole`,
    );
    expect(same).toEqual([{ same: true }]);
    // Still collecting after that (a flush a few intervals later succeeded).
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(first.child.exitCode).toBeNull();
    const firstPeak = peakRssMb(first.child.pid!);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);

    // A new run knows no text yet: tiny statements with the same query ids make it look up the
    // same 40 MB texts pg_stat_statements still holds.
    await admin.query("DELETE FROM bpf_stats.query_texts WHERE userid = 'plain'::regrole");
    const second = startCollector();
    await until(
      'the second run to flush',
      async () =>
        (await admin.query('SELECT 1 FROM bpf_stats.health WHERE stopped_at IS NULL AND last_flush_at IS NOT NULL')).rows.length > 0,
      second,
    );
    await asPlain(STATEMENTS);
    await until('the three texts again', async () => (await storedTexts()).size === 3, second);
    for (const len of (await storedTexts()).values()) expect(len).toBe(TEXT_MAX);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(second.child.exitCode).toBeNull();
    const secondPeak = peakRssMb(second.child.pid!);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    // Far below what one whole text would take (40 MB as a string, as much again in the socket's buffer).
    console.log(
      `query-text-bound: collector peak RSS ${firstPeak.toFixed(0)} MB (40 MB texts), ${secondPeak.toFixed(0)} MB (after the restart)`,
    );
  }, 180_000);
});
