import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { packageRoot } from '../../src/package-root.js';

/*
 * Real containers through podman (docs/containers-and-standbys.md#real-containers-podman):
 * the project's containers.conf for every podman command, podman's API service on a socket of
 * the project's (scripts/podman-service.sh) for testcontainers, and the images
 * scripts/container-images.sh builds once per machine.
 */
const run = promisify(execFile);

export const PODMAN_SOCKET = '/run/pg-bpf-stats/podman.sock';
export const CONTAINERS_CONF = join(packageRoot(), 'scripts', 'podman', 'containers.conf');
export const POSTGRES_IMAGES = {
  15: 'localhost/pg-bpf-stats-test-postgres:15-bookworm',
  17: 'localhost/pg-bpf-stats-test-postgres:17-trixie',
} as const;

// testcontainers reads these when it first connects; podman has no Ryuk (testcontainers'
// reaper container), so each test removes what it started.
process.env.DOCKER_HOST = `unix://${PODMAN_SOCKET}`;
process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
process.env.CONTAINERS_CONF = CONTAINERS_CONF;

/** Runs podman with the project's containers.conf; its stdout, trimmed. */
export async function podman(args: string[], options: { timeout?: number } = {}): Promise<string> {
  return (await run('podman', args, { timeout: options.timeout ?? 120_000, maxBuffer: 1 << 24 })).stdout.trim();
}

/** What a container wrote to its stdout and stderr (podman logs gives each on its own stream). */
export async function containerLog(container: string): Promise<string> {
  const { stdout, stderr } = await run('podman', ['logs', container], { timeout: 60_000, maxBuffer: 1 << 24 });
  return `${stdout}${stderr}`;
}

/**
 * Throws one line naming the first missing prerequisite of the container tests: podman on the
 * PATH, its API service answering on `socket`, the images. Never a skip: where these tests run,
 * bootstrap provides all of it.
 */
export async function requireContainerPrerequisites(
  options: { path?: string; socket?: string; images?: readonly string[] } = {},
): Promise<void> {
  const path = options.path ?? process.env.PATH ?? '';
  const socket = options.socket ?? PODMAN_SOCKET;
  const podmanPath = path
    .split(delimiter)
    .map((dir) => join(dir, 'podman'))
    .find((file) => existsSync(file));
  if (!podmanPath) throw new Error('container tests: podman is not installed (bash scripts/bootstrap.sh installs it, as root)');
  try {
    await run(podmanPath, ['--remote', '--url', `unix://${socket}`, 'version'], { timeout: 15_000 });
  } catch {
    throw new Error(`container tests: podman's API service does not answer on ${socket} (bash scripts/podman-service.sh starts it)`);
  }
  for (const image of options.images ?? Object.values(POSTGRES_IMAGES)) {
    try {
      await run(podmanPath, ['image', 'exists', image], { timeout: 15_000 });
    } catch {
      throw new Error(`container tests: the image ${image} is missing (bash scripts/container-images.sh builds it)`);
    }
  }
}

/**
 * The collector's image of this checkout's package, built when the package changed
 * (scripts/container-images.sh, whose `npm pack` builds this checkout). PG_BPF_STATS_TEST_COLLECTOR_IMAGE
 * names an image that script built from a copy of the tree instead, used as is: for a shared
 * checkout where a build must not run while others edit it.
 */
export async function collectorImage(): Promise<string> {
  const given = process.env.PG_BPF_STATS_TEST_COLLECTOR_IMAGE;
  if (given) return given;
  const { stdout } = await run('bash', [join(packageRoot(), 'scripts', 'container-images.sh')], {
    timeout: 600_000,
    maxBuffer: 1 << 24,
  });
  return stdout.trim().split('\n').at(-1)!;
}

/** The host pid of a container's main process (the postmaster, for the postgres images). */
export async function mainHostPid(container: string): Promise<number> {
  return Number(await podman(['inspect', '--format', '{{.State.Pid}}', container]));
}

/** A name no other test or checkout uses at the same time. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}`;
}
