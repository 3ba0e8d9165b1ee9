/*
 * The collector's image (deploy/container/Containerfile): its size, and how long the collector
 * takes to start in a container beside PostgreSQL 17 (the pod placement: the server's pid and
 * network namespaces shared), read-only root filesystem, the documented capabilities only.
 *
 * - start: `podman run` spawned to the collector's "collecting every" line (the container
 *   created and started by runc, node started, probes attached, schema checked, first flush);
 * - in-process: the collector's own "attached probe sets (N ms after the process started)";
 * - with a new anonymous volume for V8's code cache each start (the image's VOLUME; `--rm`
 *   removes it), and with a named volume kept between starts (the first start's cache used).
 *
 * Run (root, after bash scripts/container-images.sh): node dist/bench/container-start.js [--runs 5]
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { packageRoot } from '../src/package-root.js';
import { median } from './report.js';
import { runBench } from './run-bench.js';

const run = promisify(execFile);
const print = (line = '') => process.stdout.write(`${line}\n`);
const { values } = parseArgs({ args: process.argv.slice(2), options: { runs: { type: 'string', default: '5' } } });
const runs = Number(values.runs);
process.env.CONTAINERS_CONF = join(packageRoot(), 'scripts', 'podman', 'containers.conf');
const podman = async (args: string[]) => (await run('podman', args, { maxBuffer: 1 << 24 })).stdout.trim();
const range = (xs: number[]) => `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;
const CAPABILITIES = ['BPF', 'PERFMON', 'SYS_PTRACE', 'DAC_READ_SEARCH', 'SYS_ADMIN'];

/** One start: ms from spawn to "collecting every", the collector's own attach figure, then a clean stop. */
async function startOnce(image: string, server: string, password: string, cacheVolume: string | null) {
  const name = `pg-bpf-stats-bench-${randomBytes(4).toString('hex')}`;
  const args = ['run', '--rm', '--name', name, '--pid', `container:${server}`, '--network', `container:${server}`, '--read-only'];
  args.push('--cap-drop', 'ALL', ...CAPABILITIES.flatMap((c) => ['--cap-add', c]), '-e', `PGPASSWORD=${password}`);
  if (cacheVolume) args.push('-v', `${cacheVolume}:/var/cache/pg-bpf-stats`);
  args.push(image, 'run', '--dsn', 'postgresql://postgres@localhost:5432/postgres');
  const started = performance.now();
  const child = spawn('podman', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const ready = new Promise<number>((resolve, reject) => {
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      if (/collecting every/.test(stderr)) resolve(performance.now() - started);
    });
    child.on('exit', () => reject(new Error(`the collector exited: ${stderr}`)));
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    const ms = await ready;
    const attached = Number(/attached probe sets: .* \((\d+) ms after the process started/.exec(stderr)?.[1]);
    return { ms, attached };
  } finally {
    await podman(['stop', '--time', '10', name]).catch(() => undefined);
    const code = await exited;
    if (code !== 0) print(`  (exit ${code} after stop)`);
  }
}

async function main() {
  const { stdout } = await run('bash', [join(packageRoot(), 'scripts', 'container-images.sh')], { maxBuffer: 1 << 24 });
  const image = stdout.trim().split('\n').at(-1)!;
  const base = 'localhost/pg-bpf-stats-base:trixie';
  const size = async (name: string) => Number(await podman(['image', 'inspect', '--format', '{{.Size}}', name])) / 1e6;
  const imageMb = await size(image);
  const baseMb = await size(base);
  print(
    `image ${image}: ${imageMb.toFixed(0)} MB (base ${baseMb.toFixed(0)} MB: Debian 13 minbase, nodejs, libbpf1, libelf1t64; the collector's layers ${(imageMb - baseMb).toFixed(0)} MB)`,
  );

  const server = `pg-bpf-stats-bench-pg-${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  const volume = `${server}-cache`;
  await podman(['run', '-d', '--name', server, '-e', `POSTGRES_PASSWORD=${password}`, 'localhost/pg-bpf-stats-test-postgres:17-trixie']);
  try {
    // The server logs to stderr, which podman logs gives on its own stderr.
    const serverLog = async () => (await run('podman', ['logs', server]).catch(() => ({ stdout: '', stderr: '' }))).stderr;
    for (let i = 0; !(await serverLog()).includes('ready to accept connections'); i++) {
      if (i > 600) throw new Error('PostgreSQL did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    await podman(['volume', 'create', volume]);
    for (const [title, cache] of [
      ["a new anonymous volume each start (the image's VOLUME): V8's code cache made again", null],
      ["a named volume kept between starts: V8's code cache from the first start used", volume],
    ] as const) {
      const starts = [];
      for (let i = 0; i < runs; i++) starts.push(await startOnce(image, server, password, cache));
      print(`${title}:`);
      print(
        `  podman run -> collecting: ${range(starts.map((s) => s.ms))} ms; in-process to attached: ${range(starts.map((s) => s.attached))} ms`,
      );
    }
  } finally {
    await podman(['rm', '--force', server]).catch(() => undefined);
    await podman(['volume', 'rm', '--force', volume]).catch(() => undefined);
  }
}

runBench(main);
