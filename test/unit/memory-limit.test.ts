import { describe, expect, it } from 'vitest';
import { ownMemoryLimit, type ProcFiles } from '../../src/capabilities/memory-limit.js';

/*
 * Which limit holds the collector, from /proc/self/cgroup and the cgroup files as the kernel
 * writes them (v1 on our machines: the integration test runs check in a real v1 cgroup; v2
 * here, where the limit may sit on an ancestor, as a pod's does above its container's cgroup).
 */
const V2_MOUNTINFO =
  '24 30 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot';
const V1_MOUNTINFO = '30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory';

function files(cgroup: string, mountinfo: string, contents: Record<string, string>): ProcFiles {
  return { cgroup, mountinfo, read: (path) => contents[path] ?? null };
}

describe('the memory limit the collector runs under', () => {
  it('v2: the smallest memory.max from its cgroup up, the root having none', () => {
    const fs = files('0::/kubepods/pod1/ctr\n', V2_MOUNTINFO, {
      '/sys/fs/cgroup/cgroup.controllers': 'cpu memory pids\n',
      '/sys/fs/cgroup/kubepods/pod1/ctr/cgroup.controllers': 'memory\n',
      '/sys/fs/cgroup/kubepods/pod1/ctr/memory.max': 'max\n',
      '/sys/fs/cgroup/kubepods/pod1/memory.max': '268435456\n',
      '/sys/fs/cgroup/kubepods/memory.max': '1073741824\n',
    });
    expect(ownMemoryLimit(fs)).toEqual({ cgroup: '/kubepods/pod1/ctr', limitBytes: 268435456 });
  });

  it('v2: none when every memory.max up to the root says max', () => {
    const fs = files('0::/system.slice/pg-bpf-stats.service\n', V2_MOUNTINFO, {
      '/sys/fs/cgroup/cgroup.controllers': 'memory\n',
      '/sys/fs/cgroup/system.slice/pg-bpf-stats.service/cgroup.controllers': '',
      '/sys/fs/cgroup/system.slice/pg-bpf-stats.service/memory.max': 'max\n',
      '/sys/fs/cgroup/system.slice/memory.max': 'max\n',
    });
    expect(ownMemoryLimit(fs)).toEqual({ cgroup: '/system.slice/pg-bpf-stats.service', limitBytes: null });
  });

  it('v1: hierarchical_memory_limit, the page-aligned maximum meaning none', () => {
    const stat = (limit: string) => `cache 0\nrss 4096\nhierarchical_memory_limit ${limit}\nhierarchical_memsw_limit ${limit}\n`;
    const cgroup = '12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n';
    expect(ownMemoryLimit(files(cgroup, V1_MOUNTINFO, { '/sys/fs/cgroup/memory/docker/abc/memory.stat': stat('536870912') }))).toEqual({
      cgroup: '/docker/abc',
      limitBytes: 536870912,
    });
    expect(
      ownMemoryLimit(files(cgroup, V1_MOUNTINFO, { '/sys/fs/cgroup/memory/docker/abc/memory.stat': stat('9223372036854771712') })),
    ).toEqual({ cgroup: '/docker/abc', limitBytes: null });
  });

  it('v2 in a container with a cgroup namespace: its cgroup is the root of its view, and has a memory.max', () => {
    const fs = files('0::/\n', V2_MOUNTINFO, {
      '/sys/fs/cgroup/cgroup.controllers': 'memory\n',
      '/sys/fs/cgroup/memory.max': '536870912\n',
    });
    expect(ownMemoryLimit(fs)).toEqual({ cgroup: '/', limitBytes: 536870912 });
  });

  it('in a container without a cgroup namespace: the host path in /proc, its cgroup mounted as the root', () => {
    const v2 = files('0::/system.slice/docker-abc.scope\n', V2_MOUNTINFO, {
      '/sys/fs/cgroup/cgroup.controllers': 'memory\n',
      '/sys/fs/cgroup/memory.max': '268435456\n',
    });
    expect(ownMemoryLimit(v2)).toEqual({ cgroup: '/system.slice/docker-abc.scope', limitBytes: 268435456 });
    const v1 = files('12:memory:/docker/abc\n', V1_MOUNTINFO, {
      '/sys/fs/cgroup/memory/memory.stat': 'hierarchical_memory_limit 134217728\n',
    });
    expect(ownMemoryLimit(v1)).toEqual({ cgroup: '/docker/abc', limitBytes: 134217728 });
  });

  it('not known (null) without a memory hierarchy, or when no limit can be read where its cgroup would be', () => {
    expect(ownMemoryLimit(files('0::/\n', '', {}))).toBeNull();
    expect(ownMemoryLimit(files('12:memory:/elsewhere\n', V1_MOUNTINFO, {}))).toBeNull();
  });
});
