import { release } from 'node:os';
import { UserError } from '../errors.js';
import { isNativeError } from '../native/bpf-native.js';

/** A program of the object the kernel refused to load, and why: the answer of this kernel, not a bug. */
export interface VerifierRefusal {
  program: string;
  /** The verifier's reason: the last meaningful line of its log (else libbpf's own line). */
  reason: string;
  /** The one line that says it: the kernel release, the program and the reason. */
  text: string;
}

/** Lines the verifier prints after its verdict, and the log's frame: never the reason. */
const TRAILER = /^(processed \d+ insns|verification time |stack depth |-- END PROG LOAD LOG --|-- BEGIN PROG LOAD LOG --)/;

/**
 * The verifier's reason in the lines libbpf printed for a failed load: the last meaningful
 * line of the program's load log (statistics and the log's frame skipped), or null when the
 * lines hold no verifier log.
 *
 * @example
 * verifierReason(["libbpf: prog 'on_sched_switch': -- BEGIN PROG LOAD LOG --", 'combined stack size of 2 calls is 528. Too large',
 *   'processed 11697 insns (limit 1000000) max_states_per_insn 15', '-- END PROG LOAD LOG --']);
 * // 'combined stack size of 2 calls is 528. Too large'
 */
export function verifierReason(log: readonly string[]): string | null {
  const end = log.map((line) => line.trim()).lastIndexOf('-- END PROG LOAD LOG --');
  if (end < 0) return null;
  for (let i = end - 1; i >= 0; i--) {
    const line = log[i]!.trim();
    // The log's first line is libbpf's ("libbpf: prog 'x': -- BEGIN PROG LOAD LOG --"): nothing before it is the verifier's.
    if (line.startsWith('libbpf: ')) return null;
    if (line && !TRAILER.test(line)) return line;
  }
  return null;
}

/** libbpf's lines about one program: "libbpf: prog 'NAME': MESSAGE". */
const PROGRAM_LINE = /^libbpf: prog '([^']+)': (.*)$/;

/**
 * The program a failed load failed on and why, from the libbpf lines it printed (libbpf loads
 * the programs one by one and stops at the first the kernel refuses); null when no program
 * failed (a map the kernel could not create, a signal: not a refusal).
 *
 * @example
 * refusalOf(["libbpf: prog 'on_blk_start': BPF program load failed: Invalid argument", ..., "libbpf: prog 'on_blk_start': failed to load: -22"]);
 * // { program: 'on_blk_start', reason: <the verifier's last line>, text: 'Linux 6.1.0-31-cloud-amd64 refuses program on_blk_start: ...' }
 */
export function refusalOf(log: readonly string[], kernel = release()): VerifierRefusal | null {
  const said = log.flatMap((line) => {
    const m = PROGRAM_LINE.exec(line.trim());
    return m ? [{ program: m[1]!, message: m[2]! }] : [];
  });
  const failed = said.filter((s) => FAILED.test(s.message)).pop();
  if (!failed) return null;
  const { program } = failed;
  // Without a verifier log (a load refused before verification, or a program libbpf could not
  // prepare, e.g. for an attach target this kernel lacks): libbpf's first line about it, which
  // names what was missing (the later ones only say that preparing failed).
  const libbpfSays = said.find((s) => s.program === program && !FAILED.test(s.message) && !TRAILER.test(s.message));
  const reason = verifierReason(log) ?? libbpfSays?.message ?? failed.message;
  return { program, reason, text: `Linux ${kernel} refuses program ${program}: ${reason}` };
}

/** libbpf's last line about a program the kernel did not take. */
const FAILED = /^failed to load: -\d+$/;

/** The refusal a failed load (an error of the native binding) stands for, or null for any other failure. */
export function verifierRefusal(error: unknown): VerifierRefusal | null {
  if (!isNativeError(error) || !Array.isArray(error.log)) return null;
  return refusalOf(error.log);
}

/**
 * Loads an object without the programs of each set whose program the kernel refuses, and says
 * which were left out. libbpf loads an object once, so each refusal costs one more instance:
 * `open` makes it, configured, without the programs of the sets left out so far. A refused
 * program of a `required` set, or of no set (the object's own), ends it: a UserError, one line.
 * Any other failure is thrown as it is.
 *
 * @example
 * const { object, refused } = loadRefusing((out) => openWithout(out), (o) => o.load(), (p) => setsUsing(p), (s) => s === 'cpu');
 * refused.get('io')?.text; // 'Linux 6.1.0 refuses program on_blk_start: ...'
 */
export function loadRefusing<Name extends string, Object extends { close(): void }>(
  open: (leftOut: ReadonlyMap<Name, VerifierRefusal>) => Object,
  load: (object: Object) => void,
  /** The sets that load `program` (whether left out already or not). */
  setsOf: (program: string) => readonly Name[],
  required: (set: Name) => boolean,
): { object: Object; refused: Map<Name, VerifierRefusal> } {
  const refused = new Map<Name, VerifierRefusal>();
  for (;;) {
    const object = open(refused);
    try {
      load(object);
      return { object, refused };
    } catch (error) {
      object.close();
      const refusal = verifierRefusal(error);
      const sets = refusal ? setsOf(refusal.program).filter((set) => !refused.has(set)) : [];
      // Not a refusal, or one no set explains (a program left out is not loaded): as it is.
      if (!refusal || (sets.length === 0 && setsOf(refusal.program).length > 0)) throw error;
      if (sets.length === 0) throw new UserError(`the collector cannot run here: ${refusal.text}`);
      const needed = sets.find(required);
      if (needed) throw new UserError(`probe set ${needed} is not supported here: ${refusal.text}`);
      for (const set of sets) refused.set(set, refusal);
    }
  }
}
