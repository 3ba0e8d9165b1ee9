import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { packageRoot } from '../../src/package-root.js';
import { collectCpuBurn } from '../support/collect-cpu-burn.js';

/*
 * The npm package as a DBA installs it on a host without compilers: npm pack (prepack builds),
 * npm install -g into an empty prefix (dependencies from the npm registry or its cache), then
 * the installed command with a PATH that holds node and nothing to compile with.
 */
const run = promisify(execFile);
const HEAP_LIMIT_MB = 160;

let work: string;
let installed: string;
let bin: string;
let env: NodeJS.ProcessEnv;
let cluster: ThrowawayCluster;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'pg-bpf-stats-pack-'));
  const { stdout } = await run('npm', ['pack', '--pack-destination', work, '--loglevel=error'], { cwd: packageRoot(), maxBuffer: 1 << 26 });
  const tarball = join(work, stdout.trim().split('\n').at(-1)!);
  const prefix = join(work, 'prefix');
  await run('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball]);
  installed = join(prefix, 'lib', 'node_modules', 'pg-bpf-stats');
  // PATH: node and the installed command, nothing else.
  const path = join(work, 'path');
  mkdirSync(path);
  symlinkSync(process.execPath, join(path, 'node'));
  bin = join(prefix, 'bin', 'pg-bpf-stats');
  env = { PATH: `${path}:${join(prefix, 'bin')}`, HOME: work, LANG: 'C' };
  cluster = await ThrowawayCluster.start();
}, 600_000);

afterAll(async () => {
  await cluster?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the npm package', () => {
  it('holds what runs and nothing of the sources, tests or benches', () => {
    const top = readdirSync(installed).sort();
    expect(top.filter((f) => f !== 'node_modules')).toEqual([
      'README.md',
      'build',
      'dashboards',
      'deploy',
      'dist',
      'docs',
      'migrations',
      'package.json',
      'prebuilds',
      'sql',
    ]);
    expect(readdirSync(join(installed, 'build'))).toEqual(['bpf']);
    // The Grafana dashboards and the Prometheus rules (with their promtool tests) ship as files to import.
    expect(readdirSync(join(installed, 'dashboards')).sort()).toEqual(['pg-bpf-stats-postgresql.json', 'pg-bpf-stats-prometheus.json']);
    expect(readdirSync(join(installed, 'deploy', 'prometheus')).sort()).toEqual([
      'pg-bpf-stats.rules.test.yml',
      'pg-bpf-stats.rules.yml',
      'pg-bpf-stats.statements.rules.test.yml',
    ]);
    expect(readdirSync(join(installed, 'build', 'bpf'))).toEqual(['pgstats.bpf.o']);
    // One bundled file runs (minified; its source map beside it, read only with node's
    // --enable-source-maps), through its launcher; of the dependencies only the addon's finder
    // is installed beside it. No code cache yet: the first start makes it.
    expect(readdirSync(join(installed, 'dist')).sort()).toEqual(['pg-bpf-stats.cjs', 'pg-bpf-stats.cjs.map', 'pg-bpf-stats.js']);
    expect(readdirSync(join(installed, 'node_modules')).filter((f) => f !== '.bin')).toEqual(['node-gyp-build']);
    expect(
      readdirSync(join(installed, 'prebuilds', `${process.platform}-${process.arch}`)).filter((f) => f.endsWith('.node')),
    ).toHaveLength(1);
  });

  it('runs with no compiler reachable: check, then run --duration 3s whose figures match the scheduler', async () => {
    for (const tool of ['clang', 'cc', 'gcc', 'g++', 'make', 'bpftool']) {
      const reachable = env.PATH!.split(':').filter((dir) => existsSync(join(dir, tool)));
      expect(reachable, tool).toEqual([]);
    }
    const check = await run(bin, ['check', '--dsn', cluster.connectionString()], { env });
    expect(check.stdout).toMatch(/^ok +bpf load /m);
    expect(check.stdout).toMatch(/^ok +probes cpu /m);

    const outcome = await collectCpuBurn(cluster, [bin], env);
    expect(outcome.code, outcome.stderr).toBe(0);
    // The bin's first line caps V8's heap (docs/endurance.md#bounded-memory-visible-overflow): node got the flag.
    expect(outcome.argv.slice(0, 2)).toEqual(['node', `--max-old-space-size=${HEAP_LIMIT_MB}`]);
    expect(outcome.oursMs, outcome.stderr).not.toBeNull();
    expect(Math.abs(outcome.oursMs! - outcome.truthMs)).toBeLessThanOrEqual(0.1 * outcome.truthMs + 20);

    // The first start saved V8's code cache beside the bundle (root installed the package); the
    // next start takes its functions from it and so saves nothing.
    expect(outcome.stderr).toMatch(/INFO\s+saved V8's code cache for the next start \(.*\/dist\/pg-bpf-stats\.cjs\.v8-cache, /);
    expect(readdirSync(join(installed, 'dist'))).toContain('pg-bpf-stats.cjs.v8-cache');
    const again = await run(bin, ['run', '--dsn', cluster.connectionString(), '--duration', '1s'], { env });
    expect(again.stderr).toMatch(/collecting every/);
    expect(again.stderr).not.toMatch(/code cache/);
  });

  it('says in one line what to do when the addon or the BPF object is missing (exit 2)', async () => {
    for (const [what, path, pattern] of [
      [
        'addon',
        join(installed, 'prebuilds'),
        /ERROR the native addon for linux-x64 is missing .*install pg-bpf-stats from its npm package/,
      ],
      [
        'object',
        join(installed, 'build', 'bpf', 'pgstats.bpf.o'),
        /ERROR the BPF object .*pgstats\.bpf\.o is missing: install pg-bpf-stats from its npm package/,
      ],
    ] as const) {
      renameSync(path, `${path}.away`);
      try {
        const outcome = await run(bin, ['run', '--dsn', cluster.connectionString()], { env }).then(
          () => ({ code: 0, stderr: '' }),
          (e: { code: number; stderr: string }) => e,
        );
        expect(outcome.code, what).toBe(2);
        expect(outcome.stderr.trim().split('\n'), what).toEqual([expect.stringMatching(pattern)]);
      } finally {
        renameSync(`${path}.away`, path);
      }
    }
  });
});
