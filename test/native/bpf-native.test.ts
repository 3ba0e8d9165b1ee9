/**
 * Tests of the native binding against the real kernel (root, BTF, tracefs). No mocks: the
 * fixture test/fixtures/minimal.bpf.c is compiled with clang in beforeAll, loaded and attached.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findPgBin } from '../../src/cluster/throwaway-cluster.js';
import { isNativeError, loadNative, MapType, type BpfLink, type BpfNative, type BpfObject } from '../../src/native/bpf-native.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FIXTURE = join(ROOT, 'test', 'fixtures', 'minimal.bpf.c');
// The system's Debian build (installed by scripts/bootstrap.sh), which has USDT notes.
const POSTGRES = join(findPgBin(), 'postgres');
const TRACEFS = '/sys/kernel/tracing';

const BPF_PROG_TYPE_TRACEPOINT = 5;
const BPF_PROG_TYPE_PERF_EVENT = 7;
const BPF_PROG_TYPE_TRACING = 26;
const PERF_TYPE_SOFTWARE = 1;
const PERF_COUNT_SW_CPU_CLOCK = 0;

// pcpu map keys written by the fixture's programs.
const PCPU_SCHED_SWITCH = 1;
const PCPU_RAW_SWITCH = 2;
const PCPU_PERF_EVENT = 3;

const TAG = 0x5eed;

let bpf: BpfNative;
let tmp: string;
let objPath: string;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

function u64(n: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(n);
  return b;
}

function pairKey(a: number, b: number): Buffer {
  return Buffer.concat([u32(a), u32(b)]);
}

/** Sum over CPUs of a per-CPU u64 value (each CPU's slot is 8 bytes). */
function sumPerCpu(buf: Buffer | null): bigint {
  if (!buf) return 0n;
  let sum = 0n;
  for (let off = 0; off < buf.length; off += 8) sum += buf.readBigUInt64LE(off);
  return sum;
}

function pcpuCount(obj: BpfObject, key: number): bigint {
  return sumPerCpu(obj.mapLookup('pcpu', u32(key)));
}

/** Kernel id of a BPF link fd, from /proc/self/fdinfo. */
function linkId(link: BpfLink): number {
  const info = readFileSync(`/proc/self/fdinfo/${link.fd()}`, 'utf8');
  const m = /^link_id:\s+(\d+)$/m.exec(info);
  if (!m) throw new Error(`no link_id in fdinfo:\n${info}`);
  return Number(m[1]);
}

function kernelLinkIds(): number[] {
  const out = execFileSync('bpftool', ['link', 'list', '-j'], { encoding: 'utf8' });
  return (JSON.parse(out) as { id: number }[]).map((l) => l.id);
}

function thrown(fn: () => unknown): Error & { errno?: number; code?: string } {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected an exception');
}

function callGetppid(times: number): void {
  for (let i = 0; i < times; i++) void process.ppid; // each read is a getppid() syscall
}

function openFixture(): BpfObject {
  return new bpf.BpfObject(objPath);
}

beforeAll(() => {
  bpf = loadNative();
  tmp = mkdtempSync(join(tmpdir(), 'bpf-native-test-'));

  let vmlinuxDir = join(ROOT, 'build');
  if (!existsSync(join(vmlinuxDir, 'vmlinux.h'))) {
    vmlinuxDir = tmp;
    const header = execFileSync('bpftool', ['btf', 'dump', 'file', '/sys/kernel/btf/vmlinux', 'format', 'c'], {
      maxBuffer: 512 * 1024 * 1024,
    });
    writeFileSync(join(tmp, 'vmlinux.h'), header);
  }
  objPath = join(tmp, 'minimal.bpf.o');
  execFileSync('clang', [
    '-g',
    '-O2',
    '-target',
    'bpf',
    '-D__TARGET_ARCH_x86',
    '-I/usr/include/x86_64-linux-gnu',
    `-I${vmlinuxDir}`,
    '-c',
    FIXTURE,
    '-o',
    objPath,
  ]);

  // Classic tracepoints are resolved through tracefs (events/<cat>/<name>/id).
  if (!existsSync(join(TRACEFS, 'events'))) {
    execFileSync('mount', ['-t', 'tracefs', 'nodev', TRACEFS]);
  }
  bpf.drainLog();
});

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('free functions', () => {
  it('reports libbpf version, CPUs and kernel features', () => {
    expect(bpf.libbpfVersion()).toBe('1.1');
    expect(bpf.numPossibleCpus()).toBeGreaterThanOrEqual(1);
    expect(bpf.probeProgType(BPF_PROG_TYPE_TRACEPOINT)).toBe(true);
    expect(bpf.probePerfEvent(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK)).toEqual({
      ok: true,
      errno: 0,
    });
    const hw = bpf.probePerfEvent(0, 0n); // PERF_TYPE_HARDWARE cycles: depends on the machine
    expect(typeof hw.ok).toBe('boolean');
    expect(hw.ok ? hw.errno === 0 : hw.errno > 0).toBe(true);
    const fd = bpf.bpfStatsEnable();
    expect(fd).toBeGreaterThanOrEqual(0);
    closeSync(fd);
  });

  it('does not let JS construct a BpfLink', () => {
    const Ctor = bpf.BpfLink as unknown as new () => BpfLink;
    expect(() => new Ctor()).toThrow(TypeError);
  });
});

describe('BpfObject before load', () => {
  let obj: BpfObject;
  beforeAll(() => {
    obj = openFixture();
  });
  afterAll(() => obj.close());

  it('lists programs and maps', () => {
    const progs = obj.programs();
    expect(progs).toContainEqual({
      name: 'on_switch',
      section: 'tp_btf/sched_switch',
      type: BPF_PROG_TYPE_TRACING,
      autoload: true,
    });
    expect(progs).toContainEqual({
      name: 'on_getppid',
      section: 'tracepoint/syscalls/sys_enter_getppid',
      type: BPF_PROG_TYPE_TRACEPOINT,
      autoload: true,
    });
    expect(progs.find((p) => p.name === 'on_cpu_clock')).toMatchObject({
      section: 'perf_event',
      type: BPF_PROG_TYPE_PERF_EVENT,
    });

    const maps = obj.maps();
    expect(maps).toContainEqual({
      name: 'counts',
      type: MapType.HASH,
      keySize: 8,
      valueSize: 56,
      maxEntries: 1024,
    });
    expect(maps).toContainEqual({
      name: 'pcpu',
      type: MapType.PERCPU_HASH,
      keySize: 4,
      valueSize: 8,
      maxEntries: 64,
    });
    expect(maps.some((m) => m.name.endsWith('.rodata'))).toBe(true);
  });

  it('lists .rodata variables with their offsets and sizes', () => {
    expect(obj.rodata()).toEqual([
      { name: 'cfg_tag', offset: 0, size: 4 },
      { name: 'cfg_target_tgid', offset: 8, size: 8 },
    ]);
  });

  it('describes map layouts from BTF', () => {
    const int = (name: string, offset: number, size: number, signed = false) => ({
      name,
      offset,
      size,
      kind: 'int',
      signed,
    });
    expect(obj.mapLayout('counts')).toEqual({
      key: [int('a', 0, 4), int('b', 4, 4)],
      value: [
        int('count', 0, 8),
        int('inner.x', 8, 4),
        int('inner.y', 12, 2, true),
        int('inner.z', 14, 2),
        { name: 'hist', offset: 16, size: 32, kind: 'array', signed: false, count: 4, elemSize: 8 },
        int('seen_tag', 48, 4),
        int('neg', 52, 4, true),
      ],
    });
    expect(obj.mapLayout('pcpu')).toEqual({ key: [int('', 0, 4)], value: [int('', 0, 8)] });
    expect(obj.mapLayout('.rodata').value).toEqual([int('cfg_tag', 0, 4), int('cfg_target_tgid', 8, 8)]);
  });

  it('changes max entries and autoload', () => {
    obj.setMaxEntries('pcpu', 128);
    expect(obj.maps().find((m) => m.name === 'pcpu')?.maxEntries).toBe(128);
    obj.setAutoload('bad_prog', false);
    expect(obj.programs().find((p) => p.name === 'bad_prog')?.autoload).toBe(false);
  });

  it('rejects out-of-range rodata writes and unknown names', () => {
    const e = thrown(() => obj.setRodata(12, u64(1n)));
    expect(e).toMatchObject({ errno: 34, code: 'ERANGE' });
    expect(e.message).toMatch(/out of range of \.rodata \(size 16\)/);
    expect(thrown(() => obj.setMaxEntries('nope', 1))).toMatchObject({ code: 'ENOENT' });
    expect(thrown(() => obj.setAutoload('nope', true))).toMatchObject({ code: 'ENOENT' });
  });

  it('refuses map access before load', () => {
    expect(thrown(() => obj.mapLookup('pcpu', u32(1)))).toMatchObject({ code: 'EBADF' });
    expect(thrown(() => obj.mapFd('pcpu'))).toMatchObject({ code: 'EBADF' });
    expect(thrown(() => obj.readBss(0, Buffer.alloc(8)))).toMatchObject({ code: 'EINVAL' });
  });
});

describe('load failures', () => {
  it('quotes the verifier log when a program is rejected', () => {
    const obj = openFixture(); // bad_prog is autoloaded here
    try {
      const e = thrown(() => obj.load());
      expect(isNativeError(e)).toBe(true);
      expect(e).toMatchObject({ errno: 13, code: 'EACCES' });
      expect(e.message).toMatch(/^bpf_object__load\('.*minimal\.bpf\.o'\) failed: Permission denied/);
      expect(e.message).toContain("prog 'bad_prog': BPF program load failed");
      expect(e.message).toMatch(/invalid mem access 'map_value_or_null'|R\d+ invalid mem access/);
      expect(e.message.split('\n').length).toBeLessThanOrEqual(42);
      // A second load is refused: libbpf objects cannot be reloaded.
      expect(thrown(() => obj.load())).toMatchObject({ code: 'EBUSY' });
    } finally {
      obj.close();
    }
  });

  it('throws ENOENT for a missing object file', () => {
    const e = thrown(() => new bpf.BpfObject(join(tmp, 'missing.bpf.o')));
    expect(e).toMatchObject({ errno: 2, code: 'ENOENT' });
    expect(e.message).toContain('bpf_object__open_file(');
    expect(e.message).toContain('No such file or directory');
  });
});

describe('loaded object', () => {
  let obj: BpfObject;
  let getppidLink: BpfLink | undefined;
  const links: BpfLink[] = [];
  const track = (l: BpfLink) => (links.push(l), l);

  beforeAll(() => {
    obj = openFixture();
    obj.setAutoload('bad_prog', false);
    const vars = Object.fromEntries(obj.rodata().map((v) => [v.name, v]));
    obj.setRodata(vars.cfg_tag!.offset, u32(TAG));
    obj.setRodata(vars.cfg_target_tgid!.offset, u64(BigInt(process.pid)));
    obj.load();
  });

  afterAll(() => {
    for (const l of links) l.destroy();
    obj.close();
  });

  it('refuses configuration after load', () => {
    expect(thrown(() => obj.setRodata(0, u32(1)))).toMatchObject({ code: 'EBUSY' });
    expect(thrown(() => obj.setMaxEntries('pcpu', 1))).toMatchObject({ code: 'EBUSY' });
    expect(obj.mapFd('counts')).toBeGreaterThan(0);
  });

  it('attaches tp_btf, tracepoint and raw tracepoint programs that see the config', async () => {
    track(obj.attach('on_switch'));
    getppidLink = track(obj.attachTracepoint('on_getppid', 'syscalls', 'sys_enter_getppid'));
    track(obj.attachRawTracepoint('on_raw_switch', 'sched_switch'));

    callGetppid(50);
    // bash reads getppid() at startup: the cfg_target_tgid filter must keep it out.
    const child = spawnSync('bash', ['-c', 'echo $$'], { encoding: 'utf8' });
    const childPid = Number(child.stdout.trim());
    expect(childPid).toBeGreaterThan(0);
    await sleep(100);

    const batch = obj.mapLookupBatch('counts');
    expect(batch.keySize).toBe(8);
    expect(batch.valueSize).toBe(56);
    expect(batch.count).toBe(1);
    expect(batch.keys).toEqual(pairKey(7, process.pid));
    const v = batch.values;
    expect(v.readBigUInt64LE(0)).toBeGreaterThanOrEqual(50n); // count
    expect(v.readUInt32LE(8)).toBe(42); // inner.x
    expect(v.readInt16LE(12)).toBe(-3); // inner.y
    expect(v.readUInt16LE(14)).toBe(65000); // inner.z
    expect(v.readBigUInt64LE(16 + 3 * 8)).toBe(v.readBigUInt64LE(0)); // hist[3]
    expect(v.readUInt32LE(48)).toBe(TAG); // seen_tag = cfg_tag
    expect(v.readInt32LE(52)).toBe(-1); // neg
    expect(obj.mapLookup('counts', pairKey(7, childPid))).toBeNull();

    // Context switches happened (the child ran): both sched_switch programs counted.
    expect(pcpuCount(obj, PCPU_SCHED_SWITCH)).toBeGreaterThan(0n);
    expect(pcpuCount(obj, PCPU_RAW_SWITCH)).toBeGreaterThan(0n);
  });

  it('reads .bss from its mapped memory, as the syscall reads it', async () => {
    const variable = obj.mapLayout('.bss').value.find((f) => f.name === 'switches_seen')!;
    const mapped = Buffer.alloc(8);
    obj.readBss(variable.offset, mapped);
    const first = mapped.readBigUInt64LE(0);
    expect(first).toBeGreaterThan(0n); // on_switch is attached (test above)
    await sleep(50);
    const bySyscall = obj.mapLookup('.bss', u32(0))!.readBigUInt64LE(variable.offset);
    obj.readBss(variable.offset, mapped);
    // The same live value: the syscall's read lies between the two memory reads.
    expect(bySyscall).toBeGreaterThan(first);
    expect(mapped.readBigUInt64LE(0)).toBeGreaterThanOrEqual(bySyscall);
    expect(thrown(() => obj.readBss(variable.offset, Buffer.alloc(4096)))).toMatchObject({ code: 'ERANGE' });
  });

  it('writes one .bss variable in its mapped memory, leaving the ones the programs write', async () => {
    const layout = obj.mapLayout('.bss').value;
    const mark = layout.find((f) => f.name === 'user_mark')!;
    const seen = layout.find((f) => f.name === 'switches_seen')!;
    const before = obj.mapLookup('.bss', u32(0))!.readBigUInt64LE(seen.offset);
    const value = Buffer.alloc(8);
    value.writeBigUInt64LE(0x1234_5678_9abcn);
    obj.writeBss(mark.offset, value);
    await sleep(50);
    const after = obj.mapLookup('.bss', u32(0))!;
    expect(after.readBigUInt64LE(mark.offset)).toBe(0x1234_5678_9abcn);
    // The programs' counter beside it kept counting.
    expect(after.readBigUInt64LE(seen.offset)).toBeGreaterThan(before);
    expect(thrown(() => obj.writeBss(mark.offset, Buffer.alloc(4096)))).toMatchObject({ code: 'ERANGE' });
  });

  it('returns per-CPU values for every possible CPU', () => {
    const cpus = bpf.numPossibleCpus();
    expect(obj.mapLookup('pcpu', u32(PCPU_SCHED_SWITCH))?.length).toBe(8 * cpus);
    const batch = obj.mapLookupBatch('pcpu');
    expect(batch.valueSize).toBe(8 * cpus);
    expect(batch.values.length).toBe(batch.count * 8 * cpus);
    const keys = Array.from({ length: batch.count }, (_, i) => batch.keys.readUInt32LE(i * 4));
    expect(keys).toEqual(expect.arrayContaining([PCPU_SCHED_SWITCH, PCPU_RAW_SWITCH]));
  });

  it('updates, looks up, batch-reads and deletes entries', () => {
    const value = Buffer.alloc(56);
    const n = 300;
    for (let i = 0; i < n; i++) {
      value.writeBigUInt64LE(BigInt(i), 0);
      obj.mapUpdate('counts', pairKey(1000 + i, i), value);
    }
    expect(obj.mapLookup('counts', pairKey(1005, 5))?.readBigUInt64LE(0)).toBe(5n);
    expect(obj.mapLookup('counts', pairKey(1, 1))).toBeNull();
    expect(thrown(() => obj.mapUpdate('counts', pairKey(1000, 0), value, 1))).toMatchObject({
      code: 'EEXIST', // BPF_NOEXIST on an existing key
    });
    expect(thrown(() => obj.mapLookup('counts', u32(1)))).toMatchObject({ code: 'EINVAL' });

    // Small chunks: several batch calls, and (batch size 1) bucket overflow retries.
    for (const size of [1, 7, 4096]) {
      const batch = obj.mapLookupBatch('counts', size);
      expect(batch.count).toBeGreaterThanOrEqual(n + 1);
      const seen = new Set<number>();
      for (let i = 0; i < batch.count; i++) {
        const a = batch.keys.readUInt32LE(i * 8);
        if (a >= 1000) {
          seen.add(a);
          expect(batch.values.readBigUInt64LE(i * 56)).toBe(BigInt(a - 1000));
        }
      }
      expect(seen.size).toBe(n);
    }

    expect(obj.mapDelete('counts', pairKey(1000, 0))).toBe(true);
    expect(obj.mapDelete('counts', pairKey(1000, 0))).toBe(false);
    // Key 1000 is already gone: the batch delete skips it and deletes the others.
    const keys = Buffer.concat(Array.from({ length: n }, (_, i) => pairKey(1000 + i, i)));
    expect(obj.mapDeleteBatch('counts', keys, n)).toBe(n - 1);
    expect(obj.mapLookupBatch('counts').count).toBe(1);
    expect(obj.mapDeleteBatch('counts', keys, 0)).toBe(0);
  });

  it('looks up given keys, leaving out absent ones', () => {
    const value = Buffer.alloc(56);
    for (let i = 0; i < 5; i++) obj.mapUpdate('counts', pairKey(3000 + i, i), (value.writeBigUInt64LE(BigInt(i * 10), 0), value));
    const wanted = [4, 9, 0, 2]; // 9 is not in the map
    const keys = Buffer.concat(wanted.map((i) => pairKey(3000 + i, i)));
    const batch = obj.mapLookupKeys('counts', keys, wanted.length);
    expect(batch.count).toBe(3);
    expect(batch.valueSize).toBe(56);
    const got = Array.from({ length: batch.count }, (_, i) => [batch.keys.readUInt32LE(i * 8), batch.values.readBigUInt64LE(i * 56)]);
    expect(got).toEqual([
      [3004, 40n],
      [3000, 0n],
      [3002, 20n],
    ]);
    expect(obj.mapLookupKeys('counts', keys, 0).count).toBe(0);
    expect(thrown(() => obj.mapLookupKeys('counts', keys, wanted.length + 1))).toMatchObject({ code: 'ERANGE' });
    // Per-CPU values come whole, every possible CPU's.
    const pcpu = obj.mapLookupKeys('pcpu', u32(PCPU_SCHED_SWITCH), 1);
    expect(pcpu.count).toBe(1);
    expect(pcpu.values.length).toBe(8 * bpf.numPossibleCpus());
    obj.mapDeleteBatch('counts', keys, wanted.length);
  });

  it('takes every entry in batches, leaving the map empty', () => {
    const value = Buffer.alloc(56);
    const n = 300;
    for (let i = 0; i < n; i++) obj.mapUpdate('counts', pairKey(4000 + i, i), (value.writeBigUInt64LE(BigInt(i), 0), value));
    // Batch size 1: several calls and bucket overflow retries, as for mapLookupBatch.
    const taken = obj.mapLookupAndDeleteBatch('counts', 1);
    const mine = new Map<number, bigint>();
    for (let i = 0; i < taken.count; i++) {
      const a = taken.keys.readUInt32LE(i * 8);
      if (a >= 4000) mine.set(a, taken.values.readBigUInt64LE(i * 56));
      // The fixture's programs' own entries go back: later tests read them.
      else obj.mapUpdate('counts', taken.keys.subarray(i * 8, i * 8 + 8), taken.values.subarray(i * 56, i * 56 + 56));
    }
    expect(mine.size).toBe(n);
    expect([...mine].every(([a, v]) => v === BigInt(a - 4000))).toBe(true);
    const left = obj.mapLookupBatch('counts');
    expect(Array.from({ length: left.count }, (_, i) => left.keys.readUInt32LE(i * 8)).filter((a) => a >= 4000)).toEqual([]);
  });

  it('fires a perf_event program on a software event', async () => {
    const before = pcpuCount(obj, PCPU_PERF_EVENT);
    const link = obj.attachPerfEvent('on_cpu_clock', {
      type: PERF_TYPE_SOFTWARE,
      config: PERF_COUNT_SW_CPU_CLOCK,
      samplePeriod: 100_000, // every 100us of CPU clock
      cpu: 0,
    });
    const deadline = Date.now() + 100;
    while (Date.now() < deadline); // keep a CPU busy too
    await sleep(100);
    const during = pcpuCount(obj, PCPU_PERF_EVENT);
    expect(during).toBeGreaterThan(before);

    link.destroy();
    const after = pcpuCount(obj, PCPU_PERF_EVENT);

    const bad = thrown(() => obj.attachPerfEvent('on_cpu_clock', { type: 0x7fff, config: 0, samplePeriod: 1, cpu: 0 }));
    expect(bad.message).toMatch(/^perf_event_open\(prog 'on_cpu_clock', perf_event type 32767/);
    expect(bad.errno).toBeGreaterThan(0);
    await sleep(100);
    expect(pcpuCount(obj, PCPU_PERF_EVENT)).toBe(after);
  });

  it('detaches on destroy (link gone from the kernel, counts stop)', async () => {
    const link = getppidLink!;
    const id = linkId(link);
    expect(kernelLinkIds()).toContain(id);

    const key = pairKey(7, process.pid);
    const countOf = () => obj.mapLookup('counts', key)!.readBigUInt64LE(0);
    const c0 = countOf();
    callGetppid(10);
    expect(countOf() - c0).toBe(10n);

    link.destroy();
    link.destroy(); // idempotent
    expect(kernelLinkIds()).not.toContain(id);
    const c1 = countOf();
    callGetppid(10);
    await sleep(10);
    expect(countOf()).toBe(c1);
    expect(thrown(() => link.fd())).toMatchObject({ code: 'EBADF' });
    expect(thrown(() => link.pin('/sys/fs/bpf/never'))).toMatchObject({ code: 'EBADF' });

    // The same program can be attached again once detached.
    const again = track(obj.attachTracepoint('on_getppid', 'syscalls', 'sys_enter_getppid'));
    callGetppid(5);
    expect(countOf() - c1).toBe(5n);
    again.destroy();
  });

  it("loads a second instance on the first one's maps (reuseMapFd): it adds to them and runs on their .rodata", () => {
    const second = openFixture();
    try {
      for (const p of second.programs()) second.setAutoload(p.name, p.name === 'on_getppid');
      // libbpf's USDT maps number each object's specs from 0: they stay per object.
      for (const m of second.maps()) if (!m.name.startsWith('__bpf_usdt')) second.reuseMapFd(m.name, obj.mapFd(m.name));
      second.load();
      expect(thrown(() => second.reuseMapFd('counts', obj.mapFd('counts')))).toMatchObject({ code: 'EBUSY' });

      const key = pairKey(7, process.pid);
      obj.mapUpdate('counts', key, Buffer.alloc(56));
      const link = second.attachTracepoint('on_getppid', 'syscalls', 'sys_enter_getppid');
      try {
        callGetppid(7);
      } finally {
        link.destroy();
      }
      const value = obj.mapLookup('counts', key)!;
      expect(value.readBigUInt64LE(0)).toBe(7n);
      // The second instance's own .rodata image is all zeros: TAG is the first one's, shared.
      expect(value.readUInt32LE(48)).toBe(TAG);
    } finally {
      second.close();
    }
  });

  it('pins and unpins links and maps', () => {
    const base = `/sys/fs/bpf/pg-bpf-stats-native-test-${process.pid}`;
    const link = track(obj.attachRawTracepoint('on_raw_switch', 'sched_switch'));
    link.pin(`${base}-link`);
    expect(existsSync(`${base}-link`)).toBe(true);
    link.unpin();
    expect(existsSync(`${base}-link`)).toBe(false);

    obj.pinMap('counts', `${base}-map`);
    expect(existsSync(`${base}-map`)).toBe(true);
    obj.unpinMap('counts', `${base}-map`);
    expect(existsSync(`${base}-map`)).toBe(false);
  });

  it('reports attach failures with errno and the libbpf log', () => {
    bpf.drainLog();
    const tp = thrown(() => obj.attachTracepoint('on_getppid', 'syscalls', 'sys_enter_no_such_call'));
    expect(tp).toMatchObject({ errno: 2, code: 'ENOENT' });
    expect(tp.message).toContain("bpf_program__attach_tracepoint(prog 'on_getppid', tracepoint 'syscalls/sys_enter_no_such_call') failed");

    const usdt = thrown(() => obj.attachUsdt('on_query_start', -1, '/bin/true', 'postgresql', 'query__start'));
    expect(isNativeError(usdt)).toBe(true);
    expect(usdt.message).toContain("bpf_program__attach_usdt(prog 'on_query_start', usdt 'postgresql:query__start' in /bin/true");
    expect(usdt.message).toContain('no USDT notes section (.note.stapsdt)');
    expect(bpf.drainLog().some((l) => l.includes('no USDT notes section'))).toBe(true);
    expect(bpf.drainLog()).toEqual([]);

    expect(thrown(() => obj.attach('no_such_prog'))).toMatchObject({ code: 'ENOENT' });
    expect(() => obj.attachTracepoint('on_getppid', 'syscalls', 1 as unknown as string)).toThrow(TypeError);
  });

  it('attaches USDT and uprobes to postgres', () => {
    const usdt = obj.attachUsdt('on_query_start', -1, POSTGRES, 'postgresql', 'query__start', 42n);
    // A USDT link is a set of uprobes: no single fd to expose or pin.
    expect(thrown(() => usdt.fd())).toMatchObject({ code: 'EOPNOTSUPP' });
    usdt.destroy();

    const uprobe = obj.attachUprobe('on_uprobe', false, -1, POSTGRES, 'LWLockAcquire', 0);
    expect(kernelLinkIds()).toContain(linkId(uprobe));
    uprobe.destroy();

    const ret = obj.attachUprobe('on_uprobe', true, -1, POSTGRES, 'LWLockAcquire', 0);
    ret.destroy();

    const missing = thrown(() => obj.attachUprobe('on_uprobe', false, -1, POSTGRES, 'NoSuchFunctionHere', 0));
    expect(missing.message).toContain('bpf_program__attach_uprobe_opts(');
    expect(missing.errno).toBeGreaterThan(0);
  });
});

describe('close', () => {
  it('is idempotent, and links outlive the object until destroyed', () => {
    const obj = openFixture();
    obj.setAutoload('bad_prog', false);
    obj.load();
    const link = obj.attach('on_switch');
    const id = linkId(link);
    const usdt = existsSync(POSTGRES) ? obj.attachUsdt('on_query_start', -1, POSTGRES, 'postgresql', 'query__start') : undefined;

    obj.close();
    obj.close();
    expect(thrown(() => obj.maps())).toMatchObject({ code: 'EBADF' });
    expect(thrown(() => obj.attach('on_switch'))).toMatchObject({ code: 'EBADF' });

    expect(kernelLinkIds()).toContain(id);
    link.destroy();
    expect(kernelLinkIds()).not.toContain(id);
    // USDT detach uses state owned by the bpf_object: it must still be valid here.
    usdt?.destroy();
  });
});
