import { describe, expect, it } from 'vitest';
import { assertHostReady, hostChecks } from '../../src/capabilities/host-checks.js';
import {
  CAPABILITY_BITS,
  type CapabilityName,
  effectiveCapabilities,
  hasCapability,
  MissingCapabilities,
} from '../../src/capabilities/linux-capabilities.js';
import { setCapabilities } from '../../src/capabilities/probe-set-capabilities.js';
import { PROBE_SETS } from '../../src/families/index.js';

const caps = (...names: CapabilityName[]) => names.reduce((mask, n) => mask | (1n << BigInt(CAPABILITY_BITS[n])), 0n);
const BASE = caps('CAP_BPF', 'CAP_PERFMON', 'CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH');

describe('effectiveCapabilities', () => {
  it('reads CapEff from /proc/<pid>/status text', () => {
    // setpriv --inh-caps=+bpf,+perfmon,+sys_ptrace,+dac_read_search ... grep Cap /proc/self/status
    const status =
      'Name:\tcat\nCapInh:\t000000c000080004\nCapPrm:\t000000c000080004\nCapEff:\t000000c000080004\nCapBnd:\t000000c000080004\n';
    expect(effectiveCapabilities(status)).toBe(BASE);
    expect(effectiveCapabilities('Name:\tx\n')).toBe(0n);
  });

  it('counts CAP_SYS_ADMIN for CAP_BPF and CAP_PERFMON, as the kernel does', () => {
    expect(hasCapability(caps('CAP_SYS_ADMIN'), 'CAP_BPF')).toBe(true);
    expect(hasCapability(caps('CAP_SYS_ADMIN'), 'CAP_PERFMON')).toBe(true);
    expect(hasCapability(caps('CAP_SYS_ADMIN'), 'CAP_SYS_PTRACE')).toBe(false);
  });
});

describe('hostChecks', () => {
  it('names each missing capability on its own line, whatever the uid', () => {
    const checks = hostChecks({ capEff: caps('CAP_BPF', 'CAP_SYS_PTRACE'), btfPath: '/nonexistent/vmlinux' });
    const privileges = checks.filter((c) => c.name === 'privileges');
    expect(privileges.map((c) => c.ok)).toEqual([false, false]);
    expect(privileges[0]!.detail).toMatch(/^pg-bpf-stats needs CAP_PERFMON \(/);
    expect(privileges[1]!.detail).toMatch(/^pg-bpf-stats needs CAP_DAC_READ_SEARCH \(/);
    expect(checks.find((c) => c.name === 'btf')).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^no BTF: .*CONFIG_DEBUG_INFO_BTF=y/),
    });
    for (const c of checks) expect(c.detail).not.toMatch(/\n/);
  });

  it('passes with the four base capabilities and no root', () => {
    expect(hostChecks({ capEff: BASE }).find((c) => c.name === 'privileges')).toMatchObject({ ok: true });
  });
});

describe('assertHostReady', () => {
  it('refuses an opt-in uprobe set without CAP_SYS_ADMIN, naming the capability and the sets', () => {
    expect(() => assertHostReady([], BASE)).not.toThrow();
    expect(() => assertHostReady(['sched', 'latency'], BASE)).not.toThrow();
    let error: unknown;
    try {
      assertHostReady(['query', 'locks', 'sched'], BASE);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(MissingCapabilities);
    expect((error as MissingCapabilities).exitCode).toBe(2);
    expect((error as MissingCapabilities).lines).toEqual([
      expect.stringMatching(/^probe sets query, locks need CAP_SYS_ADMIN \(attaching uprobes/),
    ]);
    expect(() => assertHostReady(['query', 'locks', 'lwlock', 'spinlock'], BASE | caps('CAP_SYS_ADMIN'))).not.toThrow();
  });

  it('lists every missing capability, one line each', () => {
    try {
      assertHostReady(['spinlock'], 0n);
      expect.unreachable();
    } catch (e) {
      expect((e as MissingCapabilities).lines.map((l) => /needs? (CAP_\w+)/.exec(l)?.[1])).toEqual([
        'CAP_BPF',
        'CAP_PERFMON',
        'CAP_SYS_PTRACE',
        'CAP_DAC_READ_SEARCH',
        'CAP_SYS_ADMIN',
      ]);
    }
  });
});

describe('setCapabilities', () => {
  it('asks CAP_SYS_ADMIN of exactly the uprobe/USDT sets', () => {
    const admin = Object.values(PROBE_SETS)
      .filter((s) => setCapabilities(s.name).includes('CAP_SYS_ADMIN'))
      .map((s) => s.name)
      .sort();
    expect(admin).toEqual(['aio', 'locks', 'lwlock', 'nested', 'query', 'spinlock']);
  });
});
