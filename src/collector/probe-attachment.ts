import type { HistSwitch, ProgramName } from '../bpf/contract.js';
import type { PostmasterTarget } from '../postmaster/postmaster-target.js';
import type { PerfEventSpec } from './perf-events.js';

/** One attachment a probe set makes: a program of the collector object and where it goes. */
export type ProbeAttachment =
  | { program: ProgramName; kind: 'auto' }
  /** The end of each top-level statement, as discovery located it for this binary. */
  | { program: ProgramName; kind: 'statement-end' }
  /**
   * Probes chosen per target: USDT where the build has it, exported functions otherwise.
   * `programs`: every program probes() may name, whatever the target (what `check` verifies).
   */
  | { kind: 'target'; programs: readonly ProgramName[]; probes(target: PostmasterTarget): TargetProbe[] }
  /** Work switched on inside `program` (already attached by another set): a bit of hist_switches. */
  | { program: ProgramName; kind: 'switch'; bit: (typeof HistSwitch)[keyof typeof HistSwitch] }
  /** A sampled perf event opened on every online CPU (user space chooses the event). */
  | { program: ProgramName; kind: 'perf-event'; event: PerfEventSpec };

/** A USDT probe (postgresql provider) or a uprobe/uretprobe on an exported function. */
export type TargetProbe =
  | { program: ProgramName; usdt: string }
  | { program: ProgramName; symbol: string; retprobe: boolean }
  /** A uprobe at one instruction (file offset), e.g. one call site inside a function. */
  | { program: ProgramName; fileOffset: bigint };

/** What the loaded object needs to know of a probe set to attach it: a name and its attachments. */
export interface AttachableSet<Name extends string = string> {
  name: Name;
  attachments: readonly ProbeAttachment[];
}

/** The programs a set attaches on `target` (a switch only flips a bit in a program another set attaches). */
export function setPrograms(set: AttachableSet, target: PostmasterTarget): ProgramName[] {
  return set.attachments.flatMap((a) => {
    switch (a.kind) {
      case 'switch':
        return [];
      case 'target':
        return a.probes(target).map((p) => p.program);
      case 'statement-end':
        return [a.program, ...preparedStatementProbes(target).map((p) => p.program)];
      default:
        return [a.program];
    }
  });
}

/**
 * Every program a set may attach on any target, and the program a switch of it works in: what
 * `check` verifies for it, and what a refusal of the kernel takes it down with.
 */
export function possibleSetPrograms(set: AttachableSet): ProgramName[] {
  return set.attachments.flatMap((a) => {
    switch (a.kind) {
      case 'target':
        return [...a.programs];
      case 'statement-end':
        return [a.program, ...PREPARED_STATEMENT_PROGRAMS];
      default:
        return [a.program];
    }
  });
}

const PREPARED_STATEMENT_PROGRAMS = ['on_execute_plan', 'on_prepare_stmt'] as const satisfies readonly ProgramName[];

/**
 * The call sites watched beside the statement end so that SQL-level PREPARE and EXECUTE get
 * pg_stat_statements' keys and calls (bpf/query.bpf.h); none where the binary has no such call.
 */
export function preparedStatementProbes(
  target: Pick<PostmasterTarget, 'preparedStatementSites'>,
): Array<{ program: ProgramName; fileOffset: bigint }> {
  const { executePlan, prepare } = target.preparedStatementSites;
  return [
    ...(executePlan === null ? [] : [{ program: 'on_execute_plan' as const, fileOffset: executePlan }]),
    ...(prepare === null ? [] : [{ program: 'on_prepare_stmt' as const, fileOffset: prepare }]),
  ];
}
