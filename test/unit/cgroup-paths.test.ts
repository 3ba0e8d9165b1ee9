import { mkdtempSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CgroupPaths, memoryHierarchyMount } from '../../src/postmaster/cgroup-paths.js';

const V1 = [
  '25 31 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755',
  '33 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw',
  '35 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory',
  '36 25 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct',
].join('\n');
const V2 = [
  '24 30 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot',
].join('\n');

describe('memory cgroup paths', () => {
  it("finds cgroup v1's memory hierarchy before the unified one, and cgroup v2 alone", () => {
    expect(memoryHierarchyMount(V1)).toBe('/sys/fs/cgroup/memory');
    expect(memoryHierarchyMount(V2)).toBe('/sys/fs/cgroup');
    expect(memoryHierarchyMount('')).toBeNull();
  });

  it('names an id by the path of the directory whose inode it is, and null for 0 or an unknown id', () => {
    const root = mkdtempSync(join(tmpdir(), 'cgroup-paths-'));
    try {
      mkdirSync(join(root, 'kubepods', 'pod1', 'ctr'), { recursive: true });
      const paths = new CgroupPaths(root);
      const ino = statSync(join(root, 'kubepods', 'pod1', 'ctr'), { bigint: true }).ino;
      expect(paths.pathOf(ino)).toBe('/kubepods/pod1/ctr');
      expect(paths.pathOf(statSync(root, { bigint: true }).ino)).toBe('/');
      expect(paths.pathOf(0n)).toBeNull();
      expect(paths.pathOf(1n)).toBeNull();
    } finally {
      rmSync(root, { recursive: true });
    }
  });

  it('walks again at once for an id seen after the last walk (a new cgroup), and once per read for ids that are gone', () => {
    const root = mkdtempSync(join(tmpdir(), 'cgroup-paths-'));
    try {
      const paths = new CgroupPaths(root);
      expect(paths.pathOf(statSync(root, { bigint: true }).ino)).toBe('/');
      // A container started after that walk: its cgroup is named by the next read, not 10 s later.
      mkdirSync(join(root, 'ctr-a'));
      const readMs = performance.now();
      expect(paths.pathOf(statSync(join(root, 'ctr-a'), { bigint: true }).ino, readMs)).toBe('/ctr-a');
      // An id that read found gone (1n) costs no second walk: a cgroup made since stays unknown to that read...
      expect(paths.pathOf(1n, readMs)).toBeNull();
      mkdirSync(join(root, 'ctr-b'));
      const inoB = statSync(join(root, 'ctr-b'), { bigint: true }).ino;
      expect(paths.pathOf(inoB, readMs)).toBeNull();
      // ...and is found by the next read's walk.
      expect(paths.pathOf(inoB, performance.now())).toBe('/ctr-b');
    } finally {
      rmSync(root, { recursive: true });
    }
  });
});
