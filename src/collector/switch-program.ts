import { release } from 'node:os';
import type { ProgramName } from '../bpf/contract.js';
import type { BpfObject } from '../native/bpf-native.js';
import type { KernelFeatures } from './kernel-features.js';
import type { AttachableSet, ProbeAttachment } from './probe-attachment.js';

/**
 * The switch-out on sched_switch comes in two programs (bpf/cpu.bpf.h), of which one is loaded:
 * `on_sched_switch` takes the tracepoint's prev_state argument (Linux 5.18+), `on_switch_3args`
 * reads the state from the task on kernels whose tracepoint passes three arguments. The probe
 * sets declare `on_sched_switch` (src/families/cpu/, latency/); the loader names the one chosen
 * here in their place (withSwitchProgram) and leaves the other unloaded (otherSwitchPrograms):
 * everything after that (what loads, what `check` verifies, what a refusal takes down, what is
 * attached) sees one program.
 */
export const SWITCH_PROGRAMS = ['on_sched_switch', 'on_switch_3args'] as const satisfies readonly ProgramName[];

export type SwitchProgram = (typeof SWITCH_PROGRAMS)[number];

/** The name the probe sets declare the switch-out by. */
const DECLARED: SwitchProgram = 'on_sched_switch';

/**
 * The switch-out program for `kernel`: on_switch_3args where sched_switch passes three
 * arguments (before 5.18, commit fa2c3254d7cf; a distribution's older kernel may have the fourth
 * backported, so its BTF says), else on_sched_switch (also when the BTF does not say: a kernel
 * that then refuses it says so in `check`). A release from 5.18 on has the fourth argument
 * whatever its BTF: the prototype is not read there (a cold walk of the BTF's types to it is
 * ~7 ms of CPU at start-up, KernelFeatures.tracepointArgs).
 *
 * @example
 * switchProgram(KernelFeatures.host()); // 'on_sched_switch' on 6.18, 'on_switch_3args' on 5.15
 */
export function switchProgram(kernel: Pick<KernelFeatures, 'tracepointArgs'>, linux: string = release()): SwitchProgram {
  if (releaseAtLeast(linux, 5, 18)) return 'on_sched_switch';
  return kernel.tracepointArgs('sched_switch') === 3 ? 'on_switch_3args' : 'on_sched_switch';
}

/** Whether a kernel release ("6.18.44-fc", "5.14.0-427.el9.x86_64") is `major`.`minor` or newer; false when it does not parse. */
function releaseAtLeast(linux: string, major: number, minor: number): boolean {
  const m = /^(\d+)\.(\d+)/.exec(linux);
  if (!m) return false;
  const [have, haveMinor] = [Number(m[1]), Number(m[2])];
  return have > major || (have === major && haveMinor >= minor);
}

/** `set` with its attachments naming `program` where they name the switch-out. */
export function setWithSwitchProgram<S extends AttachableSet>(set: S, program: SwitchProgram): S {
  if (program === DECLARED) return set;
  const rename = (a: ProbeAttachment): ProbeAttachment => ('program' in a && a.program === DECLARED ? { ...a, program } : a);
  return { ...set, attachments: set.attachments.map(rename) };
}

/** Every set of `sets` with setWithSwitchProgram. */
export function withSwitchProgram<Name extends string, S extends AttachableSet<Name>>(
  sets: Readonly<Record<Name, S>>,
  program: SwitchProgram,
): Record<Name, S> {
  return Object.fromEntries(Object.entries<S>(sets).map(([name, set]) => [name, setWithSwitchProgram(set, program)])) as Record<Name, S>;
}

/** Turns off the switch-out programs other than `program` (between open and load); returns those it turned off. */
export function otherSwitchProgramsOff(object: Pick<BpfObject, 'programs' | 'setAutoload'>, program: SwitchProgram): string[] {
  const off: string[] = [];
  for (const p of object.programs()) {
    if (p.autoload && p.name !== program && (SWITCH_PROGRAMS as readonly string[]).includes(p.name)) {
      object.setAutoload(p.name, false);
      off.push(p.name);
    }
  }
  return off;
}
