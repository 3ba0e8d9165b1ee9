import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import type { ProgramName } from '../bpf/contract.js';
import type { BpfLink, PerfEventOptions } from '../native/bpf-native.js';

/** What attaching needs of a BPF object: its programs, by name. */
export type ProgramAttacher = Pick<CollectorBpfObject, 'attach' | 'attachUsdt' | 'attachUprobe' | 'attachPerfEvent'>;

/**
 * libbpf's own maps for USDT arguments: each object numbers its USDT specs from 0, so two
 * objects sharing these would overwrite each other's. They stay per object.
 */
const PER_OBJECT_MAP = /^__bpf_usdt_/;

/**
 * The collector's programs wherever they were loaded. The object is loaded with the programs
 * that start needs (the verifier's time is most of a start: bench/journal/start-up.md#start-up); an opt-in set's
 * programs are loaded when the set is first attached, into a second instance of the same object
 * file that shares every map of the first (its .bss, .rodata and .kconfig included), so they
 * read and write the same figures, settings and globals. Each such load is kept for the
 * process's life: at most one per probe set.
 *
 * @example
 * const programs = new LoadedPrograms(object, () => new (loadNative().BpfObject)(path), load);
 * programs.load(['on_executor_beg', 'on_executor_end']); // a no-op for programs loaded already
 * programs.attachUprobe('on_executor_beg', false, -1, binary, 'ExecutorStart', 0);
 */
export class LoadedPrograms implements ProgramAttacher {
  private readonly homes = new Map<ProgramName, CollectorBpfObject>();
  private readonly extra: CollectorBpfObject[] = [];

  /**
   * @param base the loaded object, owner of the maps
   * @param open a new, unloaded instance of the same object file
   * @param loadObject loads an object (the caller's error handling, e.g. for EAGAIN)
   */
  constructor(
    private readonly base: CollectorBpfObject,
    private readonly open: () => CollectorBpfObject,
    private readonly loadObject: (object: CollectorBpfObject) => void,
  ) {
    for (const p of base.programs()) if (p.autoload) this.homes.set(p.name as ProgramName, base);
  }

  /** Loads those of `programs` not loaded yet, together, in one more instance sharing the base object's maps. */
  load(programs: readonly ProgramName[]): void {
    const wanted = new Set(programs.filter((p) => !this.homes.has(p)));
    if (!wanted.size) return;
    const object = this.open();
    try {
      for (const p of object.programs()) object.setAutoload(p.name as ProgramName, wanted.has(p.name as ProgramName));
      for (const m of object.maps()) {
        if (!PER_OBJECT_MAP.test(m.name)) object.reuseMapFd(m.name, this.base.mapFd(m.name));
      }
      this.loadObject(object);
    } catch (error) {
      object.close();
      throw error;
    }
    this.extra.push(object);
    for (const p of wanted) this.homes.set(p, object);
  }

  attach(prog: ProgramName): BpfLink {
    return this.home(prog).attach(prog);
  }

  attachUsdt(prog: ProgramName, pid: number, binaryPath: string, provider: string, name: string, cookie?: bigint): BpfLink {
    return this.home(prog).attachUsdt(prog, pid, binaryPath, provider, name, cookie);
  }

  attachUprobe(prog: ProgramName, retprobe: boolean, pid: number, binaryPath: string, funcName: string | null, offset: number): BpfLink {
    return this.home(prog).attachUprobe(prog, retprobe, pid, binaryPath, funcName, offset);
  }

  attachPerfEvent(prog: ProgramName, opts: PerfEventOptions): BpfLink {
    return this.home(prog).attachPerfEvent(prog, opts);
  }

  /** Frees the instances loaded on demand (the base object is its owner's to close). */
  close(): void {
    for (const object of this.extra.splice(0)) object.close();
    this.homes.clear();
  }

  private home(prog: ProgramName): CollectorBpfObject {
    const object = this.homes.get(prog);
    if (!object) throw new Error(`BPF program ${prog} is not loaded: load() it before attaching`);
    return object;
  }
}
