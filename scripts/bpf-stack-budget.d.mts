// Types of scripts/bpf-stack-budget.mjs for the tests that import it (tsconfig has no allowJs).

export const MAX_BPF_STACK: 512;

/** A frame as the JIT sizes it: the depth rounded up to 16 bytes. */
export function frameBytes(depth: number): number;

export interface BpfFunction {
  name: string;
  /** ELF section: '.text' for subprograms, the attach section (e.g. 'tp_btf/sched_switch') for programs. */
  section: string;
  sectionIndex: number;
  /** Byte offsets of the function in its section. */
  start: number;
  end: number;
  isProgram: boolean;
  /** Deepest byte below r10 the function's own code addresses. */
  depth: number;
  /** Functions called (and callbacks passed by address), in the order of the call sites. */
  calls: string[];
}

export function readBpfFunctions(bytes: Uint8Array): BpfFunction[];

export interface StackFrame {
  name: string;
  depth: number;
  /** What the frame counts in the chain: depth rounded up to 16. */
  bytes: number;
}

export interface ProgramStackBudget {
  program: string;
  section: string;
  /** The program's deepest call chain, the program first. */
  chain: StackFrame[];
  total: number;
}

/** Every program's deepest call chain, deepest total first. Throws when the object cannot be read. */
export function stackBudget(object: string | Uint8Array): ProgramStackBudget[];

/** `caller (304) -> callee (208) -> leaf (16) = 528` */
export function formatChain(budget: ProgramStackBudget): string;
