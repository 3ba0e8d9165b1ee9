import { Programs, type ProgramName } from './contract.js';

/**
 * The kernel tracepoint a tp_btf program attaches to, read from its ELF section
 * (SEC("tp_btf/<name>") in bpf/), so the tracepoint is named once, where the program is.
 *
 * @example
 * tracepointOf('on_blk_start'); // 'block_io_start'
 */
export function tracepointOf(program: ProgramName): string {
  const section: string = Programs[program];
  if (!section.startsWith('tp_btf/')) throw new Error(`${program} is not a tp_btf program (section ${section})`);
  return section.slice('tp_btf/'.length);
}
