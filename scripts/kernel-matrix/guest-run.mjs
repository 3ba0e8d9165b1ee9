// Inside a kernel-matrix guest (started by guest-init.sh): a PostgreSQL 15 cluster, then the
// installed npm package's own commands against it (`pg-bpf-stats check`, then `pg-bpf-stats run`
// with the default sets and the query set), a workload, and the ground truth next to what the
// collector wrote: the scheduler's on-CPU time of a CPU-bound backend (/proc/<pid>/schedstat)
// and pg_stat_statements' calls. Everything is reported raw, as one JSON object between markers
// on the second serial port; test/integration/kernel-matrix.test.ts decides what is right.
// Plain JavaScript: it runs on the guest's node, with nothing but the package installed.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';

const RESULTS = '/dev/ttyS1';
const BEGIN = '=====KERNEL-MATRIX-RESULT-BEGIN=====';
const END = '=====KERNEL-MATRIX-RESULT-END=====';
const PG = '/usr/lib/postgresql/15/bin';
const DATA = '/var/lib/postgresql/data';
const SOCKET = '/run/postgresql';
const DSN = `postgresql://postgres@/postgres?host=${SOCKET}`;
const BURN = 'SELECT count(*) FROM generate_series(1, 1000000) g WHERE g % 7 = 0';
const CALLS = 300;

const started = performance.now();
const uptimeS = () => Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
const result = {
  kernel: readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim(),
  node: process.version,
  /** Seconds since the kernel started when this script started: boot, unpacking the root, node's start. */
  bootS: uptimeS(),
  /** Seconds each step took. */
  phases: {},
  errors: [],
};
const log = (line) => process.stdout.write(`guest-run: ${line}\n`);
async function phase(name, step) {
  log(`${name} …`);
  const t = performance.now();
  try {
    return await step();
  } finally {
    result.phases[name] = Math.round(performance.now() - t) / 1000;
    log(`${name}: ${result.phases[name]} s`);
  }
}

/** Runs a command to its end; a non-zero exit is an outcome. */
function sh(file, args, options = {}) {
  const r = spawnSync(file, args, { encoding: 'utf8', timeout: 180_000, maxBuffer: 1 << 24, ...options });
  return { code: r.status, signal: r.signal, stdout: r.stdout ?? '', stderr: (r.stderr ?? '') + (r.error ? String(r.error) : '') };
}
const asPostgres = (file, args) => sh('setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', file, ...args]);
function psql(sql) {
  const r = sh(`${PG}/psql`, ['-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', DSN, '-c', sql]);
  if (r.code !== 0) throw new Error(`psql ${JSON.stringify(sql)}: ${r.stderr.trim()}`);
  return r.stdout.trim();
}
/** A backend's on-CPU time so far, in ms, as the scheduler keeps it (test/support/cpu-time.ts). */
const cpuTimeMs = (pid) => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;

/** One psql session kept open (one backend), a query per line in, a line per query out. */
class Session {
  constructor() {
    this.child = spawn(`${PG}/psql`, ['-X', '-At', '-q', '-d', DSN], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.out = '';
    this.err = '';
    this.waiting = [];
    this.child.stdout.on('data', (d) => {
      this.out += d;
      this.deliver();
    });
    this.child.stderr.on('data', (d) => (this.err += d));
  }
  deliver() {
    for (let i = this.out.indexOf('\n'); i >= 0 && this.waiting.length; i = this.out.indexOf('\n')) {
      this.waiting.shift()(this.out.slice(0, i));
      this.out = this.out.slice(i + 1);
    }
  }
  query(sql, timeoutMs = 300_000) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${sql} in ${timeoutMs} ms: ${this.err}`)), timeoutMs);
      this.waiting.push((line) => {
        clearTimeout(timer);
        resolve(line);
      });
      this.child.stdin.write(`${sql};\n`);
      this.deliver();
    });
  }
  end() {
    this.child.stdin.end();
    return new Promise((resolve) => this.child.on('exit', resolve));
  }
}

async function main() {
  await phase('postgres', async () => {
    mkdirSync(SOCKET, { recursive: true });
    sh('chown', ['postgres:postgres', SOCKET]);
    // build-rootfs.sh made the cluster; initdb here only in a root made otherwise.
    const made = existsSync(`${DATA}/PG_VERSION`);
    const init = made
      ? { code: 0 }
      : asPostgres(`${PG}/initdb`, ['-D', DATA, '-U', 'postgres', '--auth=trust', '--no-locale', '-E', 'UTF8', '--no-sync']);
    if (init.code !== 0) throw new Error(`initdb: ${init.stderr}`);
    const settings = [
      "listen_addresses=''",
      `unix_socket_directories=${SOCKET}`,
      'shared_preload_libraries=pg_stat_statements',
      'compute_query_id=on',
      'fsync=off',
      'jit=off',
    ];
    const start = asPostgres(`${PG}/pg_ctl`, [
      '-D',
      DATA,
      '-w',
      '-t',
      '120',
      '-l',
      '/tmp/postgres.log',
      '-o',
      settings.map((s) => `-c ${s}`).join(' '),
      'start',
    ]);
    if (start.code !== 0) throw new Error(`pg_ctl start: ${start.stderr} ${readFileSync('/tmp/postgres.log', 'utf8')}`);
    psql('CREATE EXTENSION pg_stat_statements');
  });

  result.check = await phase('check', () => sh('pg-bpf-stats', ['check', '--dsn', DSN]));
  log(`check exited ${result.check.code}:\n${result.check.stdout}${result.check.stderr}`);

  // The default sets and the query set (calls come with it, as in the container tests).
  const collector = spawn('pg-bpf-stats', ['run', '--dsn', DSN, '--probes', 'query', '--interval', '500ms'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  collector.stderr.on('data', (d) => (stderr += d));
  collector.stdout.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => collector.on('exit', (code, signal) => resolve({ code, signal })));
  const attached = await phase('attach', () =>
    Promise.race([
      new Promise((resolve) => {
        const poll = setInterval(() => /collecting every/.test(stderr) && (clearInterval(poll), resolve(true)), 50);
        void exited.then(() => clearInterval(poll));
      }),
      exited.then(() => false),
      new Promise((resolve) => setTimeout(() => resolve(false), 300_000).unref()),
    ]),
  );
  result.run = { attached };
  if (!attached) {
    if (collector.exitCode === null) collector.kill('SIGKILL');
    Object.assign(result.run, await exited, { stderr });
    log(`run ended before collecting: ${JSON.stringify(result.run)}`);
    return;
  }

  const session = new Session();
  try {
    await phase('workload', async () => {
      const pid = Number(await session.query('SELECT pg_backend_pid()'));
      const before = cpuTimeMs(pid);
      await session.query(BURN);
      const after = cpuTimeMs(pid);
      result.burn = { pid, backendTruthMs: after, queryTruthMs: after - before };
      writeFileSync('/tmp/calls.sql', '\\set i random(1, 1000000)\nSELECT :i::int + 1 AS exact_calls_in_a_vm;\n');
      const bench = sh(`${PG}/pgbench`, [
        '-n',
        '-M',
        'extended',
        '-c',
        '1',
        '-t',
        String(CALLS),
        '-f',
        '/tmp/calls.sql',
        '-h',
        SOCKET,
        '-U',
        'postgres',
        'postgres',
      ]);
      result.pgbench = {
        code: bench.code,
        tps: Number(/tps = ([\d.]+)/.exec(bench.stdout)?.[1] ?? Number.NaN),
        stderr: bench.stderr.slice(-2000),
      };
    });
    await phase('stop', async () => {
      collector.kill('SIGTERM');
      const timer = setTimeout(() => collector.kill('SIGKILL'), 120_000);
      Object.assign(result.run, await exited, { stderr });
      clearTimeout(timer);
    });
    await phase('read', async () => {
      result.burn.backendOursMs =
        JSON.parse(psql(`SELECT coalesce(json_agg(on_cpu_ms), '[]') FROM bpf_stats.backend_stats WHERE pid = ${result.burn.pid}`))[0] ??
        null;
      result.statements = JSON.parse(
        psql(`SELECT coalesce(json_agg(json_build_object('query', s.query, 'pgss_calls', s.calls, 'total_exec_time', s.total_exec_time,
                                                         'calls', q.calls, 'on_cpu_ms', q.on_cpu_ms, 'runq_wait_ms', q.runq_wait_ms)), '[]')
                FROM public.pg_stat_statements s JOIN bpf_stats.query_stats q USING (userid, dbid, toplevel, queryid)
               WHERE s.query LIKE '%exact_calls_in_a_vm%' OR s.query LIKE '%generate_series($1, $2) g WHERE g % $3 = $4%'`),
      );
      result.pgssStatements = JSON.parse(
        psql(`SELECT coalesce(json_agg(json_build_object('query', query, 'calls', calls)), '[]') FROM public.pg_stat_statements
               WHERE query LIKE '%exact_calls_in_a_vm%' OR query LIKE '%generate_series($1, $2) g WHERE g % $3 = $4%'`),
      );
    });
  } finally {
    await session.end();
  }
}

try {
  await main();
} catch (error) {
  result.errors.push(error instanceof Error ? (error.stack ?? error.message) : String(error));
  log(`failed: ${result.errors.at(-1)}`);
}
result.guestS = Math.round(performance.now() - started) / 1000;
result.uptimeS = uptimeS();
writeFileSync(RESULTS, `\n${BEGIN}\n${JSON.stringify(result)}\n${END}\n`);
log(`done in ${result.guestS} s (uptime ${result.uptimeS} s)`);
