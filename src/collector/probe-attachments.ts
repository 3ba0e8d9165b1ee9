import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { MapName, ProgramName } from '../bpf/contract.js';
import type { BpfLink } from '../native/bpf-native.js';
import type { PostmasterTarget } from '../postmaster/postmaster-target.js';
import { attachTargetProbes } from './attach-target-probes.js';
import { markExitedWhilePaused } from './exited-while-paused.js';
import type { LoadedPrograms } from './loaded-programs.js';
import type { MapReaders } from './map-readers.js';
import type { ObjectGlobals } from './object-globals.js';
import { onlineCpus, type PerfEventSpec } from './perf-events.js';
import { preparedStatementProbes, setPrograms, type AttachableSet, type ProbeAttachment } from './probe-attachment.js';
import { SharedLinks } from './shared-link.js';
import { SwitchLink } from './switch-link.js';
import { markTrackingStart } from './tracking-start.js';
import { verifierRefusal, type VerifierRefusal } from './verifier-refusal.js';
import { UserError } from '../errors.js';

/** Start-of-wait maps: an entry whose end fell in a pause would charge the pause. */
const IN_FLIGHT_MAPS: readonly MapName[] = ['mem_stalls', 'io_inflight', 'lock_wait_starts', 'lwlock_wait_starts'];

/**
 * The probe sets attached to the loaded object, by name: attach and detach, the switches of
 * sets that share a program, pause and resume. Whether a set is supported here is decided
 * before (src/capabilities/probe-set-support.ts), not here.
 *
 * @example
 * object.probes.attach('cpu');
 * const sets = object.probes.pause(); // ... later
 * object.probes.resume(sets);
 */
export class ProbeAttachments<Name extends string> {
  private readonly links = new Map<Name, BpfLink[]>();
  private readonly shared = new SharedLinks();

  constructor(
    private readonly object: CollectorBpfObject,
    private readonly programs: LoadedPrograms,
    private readonly globals: ObjectGlobals,
    private readonly maps: MapReaders,
    private readonly target: PostmasterTarget,
    private readonly sets: Readonly<Record<Name, AttachableSet<Name>>>,
    private readonly perfEvents: Partial<Record<ProgramName, PerfEventSpec>>,
    /** Sets whose programs the kernel refused (shared with CollectorObject): noted here when a first attach finds it. */
    private readonly refused: Map<Name, VerifierRefusal> = new Map(),
  ) {}

  attached(): Name[] {
    return [...this.links.keys()];
  }

  /**
   * Attaches a probe set, loading its programs first if they were not loaded with the object.
   * A set whose program the kernel refuses (now, or when the object was loaded) is a UserError
   * saying why in one line, and nothing is attached. Attaching one that is attached already
   * does nothing.
   */
  attach(name: Name): void {
    if (this.links.has(name)) return;
    const refused = this.refused.get(name);
    if (refused) throw new UserError(`probe set ${name} is not supported here: ${refused.text}`);
    try {
      this.programs.load(setPrograms(this.sets[name], this.target));
    } catch (error) {
      const refusal = verifierRefusal(error);
      if (!refusal) throw error;
      // Remembered: the next request gets the answer without asking the verifier again.
      this.refused.set(name, refusal);
      throw new UserError(`probe set ${name} is not supported here: ${refusal.text}`);
    }
    const links: BpfLink[] = [];
    try {
      for (const a of this.sets[name].attachments) links.push(...this.attachOne(a));
    } catch (error) {
      for (const link of links) link.destroy();
      throw error;
    }
    this.links.set(name, links);
  }

  detach(name: Name): void {
    for (const link of this.links.get(name) ?? []) link.destroy();
    this.links.delete(name);
  }

  /**
   * Detaches every probe set and returns their names, for resume(). The maps keep what was
   * collected; nothing is counted until resume().
   */
  pause(): Name[] {
    const sets = this.attached();
    for (const name of sets) this.detach(name);
    return sets;
  }

  /**
   * Collection starts again after pause(), as if newly attached: a new tracking epoch makes each
   * kept record count from its task's next switch, tasks forked meanwhile count from that switch
   * too, waits whose start or end fell in the pause are forgotten, and processes that exited
   * meanwhile (their last switch unseen) are marked exited now, so the next flush closes them.
   */
  resume(sets: Name[]): void {
    if (this.attached().length) throw new Error('resume() while probe sets are attached: pause() first');
    markTrackingStart(this.globals);
    this.globals.writeBss('tracking_epoch', this.globals.readBss('tracking_epoch') + 1n);
    for (const name of IN_FLIGHT_MAPS) this.maps.clear(name);
    // One set that cannot attach again must not keep the others off.
    const failures: unknown[] = [];
    for (const name of sets) {
      try {
        this.attach(name);
      } catch (error) {
        failures.push(error);
      }
    }
    // After attaching: a process that exits from here on has its final switch seen by BPF, and
    // one that exited before (or is a zombie, its final switch done) is found here.
    markExitedWhilePaused(this.object, this.target.procShowsPgPids);
    if (failures.length) throw failures[0];
  }

  private attachOne(a: ProbeAttachment): BpfLink[] {
    switch (a.kind) {
      case 'auto':
        return [this.programs.attach(a.program)];
      case 'statement-end':
        return this.shareStatementEnd(a.program);
      case 'target':
        return attachTargetProbes(this.programs, this.target, a.probes(this.target));
      case 'switch':
        return [
          new SwitchLink(
            () => this.setHistSwitch(a.bit, true),
            () => this.setHistSwitch(a.bit, false),
          ),
        ];
      case 'perf-event': {
        const event = this.perfEvents[a.program] ?? a.event;
        const links: BpfLink[] = [];
        try {
          for (const cpu of onlineCpus()) {
            links.push(
              this.programs.attachPerfEvent(a.program, { type: event.type, config: event.config, samplePeriod: event.samplePeriod, cpu }),
            );
          }
        } catch (error) {
          for (const link of links) link.destroy();
          throw error;
        }
        return links;
      }
    }
  }

  /** The statement end and the prepared-statement call sites, shared by the sets that count calls. */
  private shareStatementEnd(program: ProgramName): BpfLink[] {
    const links = [this.shared.share(`statement-end:${program}`, () => this.attachStatementEnd(program))];
    try {
      for (const p of preparedStatementProbes(this.target)) {
        // pid -1: every backend, including those forked after attach.
        links.push(
          this.shared.share(`statement-end:${p.program}`, () =>
            this.programs.attachUprobe(p.program, false, -1, this.target.binaryPath, null, Number(p.fileOffset)),
          ),
        );
      }
    } catch (error) {
      for (const link of links) link.destroy();
      throw error;
    }
    return links;
  }

  private attachStatementEnd(program: ProgramName): BpfLink {
    const end = this.target.statementEnd!;
    // pid -1: every backend, including those forked after attach.
    return end.kind === 'usdt-site'
      ? this.programs.attachUprobe(program, false, -1, this.target.binaryPath, null, Number(end.fileOffset))
      : this.programs.attachUprobe(program, true, -1, this.target.binaryPath, end.symbol, 0);
  }

  /** Flips one bit of the object's `hist_switches` (.bss), read by the sched_switch program. */
  private setHistSwitch(bit: number, on: boolean): void {
    const current = this.globals.readBss('hist_switches');
    this.globals.writeBss('hist_switches', on ? current | BigInt(bit) : current & ~BigInt(bit));
  }
}
