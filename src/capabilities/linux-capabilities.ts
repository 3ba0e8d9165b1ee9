import { readFileSync } from 'node:fs';
import { UserError } from '../errors.js';

/**
 * The Linux capabilities the collector can need, by their bit in the capability sets
 * (include/uapi/linux/capability.h).
 */
export const CAPABILITY_BITS = {
  CAP_DAC_READ_SEARCH: 2,
  CAP_SYS_PTRACE: 19,
  CAP_SYS_ADMIN: 21,
  CAP_PERFMON: 38,
  CAP_BPF: 39,
} as const;

export type CapabilityName = keyof typeof CAPABILITY_BITS;

/**
 * What each capability is needed for, measured as a non-root user holding all of them but the
 * one named (README, "Running without root"). Each phrase ends the one-line refusal.
 */
export const CAPABILITY_USES: Readonly<Record<CapabilityName, string>> = {
  CAP_BPF: 'loading BPF programs and creating maps',
  CAP_PERFMON: 'loading tracing programs (tp_btf, perf_event) and opening the per-CPU perf events',
  CAP_SYS_PTRACE: 'inspecting the postmaster and its backends, processes of another user (/proc/<pid>/exe, /proc/<pid>/mem)',
  CAP_DAC_READ_SEARCH: "opening the backends' /proc/<pid>/mem (mode 0600, owned by postgres) to calibrate PgBackendStatus",
  CAP_SYS_ADMIN: "attaching uprobes and USDT probes: the kernel's perf uprobe PMU asks for CAP_SYS_ADMIN, CAP_PERFMON is not enough",
};

/** The capabilities every `run` needs, whatever the probe sets. */
export const BASE_CAPABILITIES: readonly CapabilityName[] = ['CAP_BPF', 'CAP_PERFMON', 'CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH'];

let own: bigint | undefined;

/**
 * The effective capability set of this process (CapEff in /proc/self/status), as a bit mask.
 *
 * @example
 * hasCapability(effectiveCapabilities(), 'CAP_BPF');
 */
export function effectiveCapabilities(status?: string): bigint {
  if (status === undefined) return (own ??= effectiveCapabilities(readFileSync('/proc/self/status', 'utf8')));
  const hex = /^CapEff:\s*([0-9a-f]+)$/im.exec(status)?.[1];
  return hex === undefined ? 0n : BigInt(`0x${hex}`);
}

/**
 * Whether `effective` grants `name`. Before CAP_BPF and CAP_PERFMON existed (Linux 5.8) the
 * kernel asked for CAP_SYS_ADMIN instead, and it still accepts CAP_SYS_ADMIN for both.
 */
export function hasCapability(effective: bigint, name: CapabilityName): boolean {
  const has = (n: CapabilityName) => ((effective >> BigInt(CAPABILITY_BITS[n])) & 1n) === 1n;
  if (name === 'CAP_BPF' || name === 'CAP_PERFMON') return has(name) || has('CAP_SYS_ADMIN');
  return has(name);
}

/** The capabilities of `required` that `effective` lacks, in the order given. */
export function missingCapabilities(required: readonly CapabilityName[], effective: bigint = effectiveCapabilities()): CapabilityName[] {
  return [...new Set(required)].filter((name) => !hasCapability(effective, name));
}

/** The one line that refuses for a missing capability, naming it and what it is for. */
export function missingCapabilityLine(name: CapabilityName, what = 'pg-bpf-stats', plural = false): string {
  return `${what} ${plural ? 'need' : 'needs'} ${name} (${CAPABILITY_USES[name]}), which this process does not have: run as root, or grant it (README, "Running without root")`;
}

/**
 * A refusal for one or more missing capabilities: `lines` has one line per capability, which
 * the CLI prints each on its own line (exit 2).
 */
export class MissingCapabilities extends UserError {
  constructor(readonly lines: readonly string[]) {
    super(lines.join('\n'));
  }
}
