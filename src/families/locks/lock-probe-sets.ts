import type { ProgramName, RodataName } from '../../bpf/contract.js';
import type { ProbeAttachment, TargetProbe } from '../../collector/probe-attachment.js';
import { hasFunction } from '../../postmaster/binary-symbols.js';
import { ElfFile } from '../../postmaster/elf-file.js';
import { findCallSite } from '../../postmaster/find-call-site.js';
import type { PostmasterTarget } from '../../postmaster/postmaster-target.js';
import type { ProbeSet } from '../family.js';

/*
 * The lock families. Each uses the USDT probes where the build has them (they give the lock
 * tag or the tranche name for free) and falls back to exported functions otherwise, so the
 * same sets work on distribution builds without --enable-dtrace.
 */

function hasUsdt(target: PostmasterTarget, name: string): boolean {
  return target.usdt.some((n) => n.provider === 'postgresql' && n.name === name);
}

/** Where perform_spin_delay calls pg_usleep, found once per binary. */
const spinSleeps = new Map<string, bigint | null>();
function spinSleep(target: PostmasterTarget): bigint | null {
  if (!spinSleeps.has(target.binaryPath))
    spinSleeps.set(target.binaryPath, findCallSite(ElfFile.read(target.binaryPath), 'perform_spin_delay', 'pg_usleep'));
  return spinSleeps.get(target.binaryPath)!;
}

/** USDT start/done pair when both exist, else entry + return probes on `symbol`. */
function startDone(
  target: PostmasterTarget,
  usdt: { start: string; done: string; startProgram: ProgramName; doneProgram: ProgramName },
  symbol: { name: string; entryProgram: ProgramName; returnProgram: ProgramName },
): TargetProbe[] {
  if (hasUsdt(target, usdt.start) && hasUsdt(target, usdt.done)) {
    return [
      { program: usdt.startProgram, usdt: usdt.start },
      { program: usdt.doneProgram, usdt: usdt.done },
    ];
  }
  return [
    { program: symbol.entryProgram, symbol: symbol.name, retprobe: false },
    { program: symbol.returnProgram, symbol: symbol.name, retprobe: true },
  ];
}

function unsupported(target: PostmasterTarget, usdt: string, symbol: string): string | null {
  if (hasUsdt(target, usdt) || hasFunction(target, symbol)) return null;
  return `${target.binaryPath} has neither the USDT probe postgresql:${usdt} nor the function ${symbol}`;
}

const locks: ProbeAttachment = {
  kind: 'target',
  programs: ['on_lock_start', 'on_lock_done', 'on_procsleep', 'on_procsleep_rt'],
  probes: (target) =>
    startDone(
      target,
      { start: 'lock__wait__start', done: 'lock__wait__done', startProgram: 'on_lock_start', doneProgram: 'on_lock_done' },
      { name: 'ProcSleep', entryProgram: 'on_procsleep', returnProgram: 'on_procsleep_rt' },
    ),
};

const lwlock: ProbeAttachment = {
  kind: 'target',
  programs: ['on_lwlock_start', 'on_lwlock_done', 'on_sema_lock', 'on_sema_lock_rt'],
  probes: (target) =>
    startDone(
      target,
      { start: 'lwlock__wait__start', done: 'lwlock__wait__done', startProgram: 'on_lwlock_start', doneProgram: 'on_lwlock_done' },
      { name: 'PGSemaphoreLock', entryProgram: 'on_sema_lock', returnProgram: 'on_sema_lock_rt' },
    ),
};

export const LOCK_PROBE_SETS: { locks: ProbeSet<'locks'>; lwlock: ProbeSet<'lwlock'>; spinlock: ProbeSet<'spinlock'> } = {
  locks: {
    name: 'locks',
    description: 'heavyweight lock waits by lock type, mode and relation (USDT lock__wait__*, or ProcSleep)',
    default: false,
    unsupportedReason: ({ target }) => unsupported(target, 'lock__wait__start', 'ProcSleep'),
    attachments: [locks],
    cost: 'two uprobe traps per lock wait (only when a backend really waits); nothing on uncontended locks',
  },
  lwlock: {
    name: 'lwlock',
    description: 'LWLock waits by tranche (USDT lwlock__wait__*, or PGSemaphoreLock sleeps)',
    default: false,
    unsupportedReason: ({ target }) => unsupported(target, 'lwlock__wait__start', 'PGSemaphoreLock'),
    attachments: [lwlock],
    cost: 'two uprobe traps per LWLock wait (per semaphore sleep without USDT); nothing on uncontended LWLocks',
  },
  spinlock: {
    name: 'spinlock',
    description: 'spinlock delays: the sleeps (pg_usleep, 1 ms and up) a spinlock wait takes once spinning did not get it',
    default: false,
    unsupportedReason: ({ target }) =>
      spinSleep(target) !== null ? null : `${target.binaryPath}: no direct call of pg_usleep found in perform_spin_delay`,
    // At the sleep itself, not the function's entry: an entry probe would trap on every spin.
    attachments: [
      { kind: 'target', programs: ['on_spin_delay'], probes: (target) => [{ program: 'on_spin_delay', fileOffset: spinSleep(target)! }] },
    ],
    cost: 'one uprobe trap per spinlock delay (a sleep of 1 ms or more); nothing while spinning or uncontended',
  },
};

/**
 * Settings of the lock programs for one target: PG17's ProcSleep takes a third argument,
 * dontWait, and returns at once when it is set (a NOWAIT attempt, not a wait).
 *
 * @example
 * lockRodata({ majorVersion: 17 } as PostmasterTarget); // { proc_sleep_dont_wait_arg: 3 }
 */
export function lockRodata(target: Pick<PostmasterTarget, 'majorVersion'>): Partial<Record<RodataName, number>> {
  return { proc_sleep_dont_wait_arg: target.majorVersion === 17 ? 3 : 0 };
}
