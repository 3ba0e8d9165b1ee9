import type { BpfLink } from '../native/bpf-native.js';
import type { PostmasterTarget } from '../postmaster/postmaster-target.js';
import type { ProgramAttacher } from './loaded-programs.js';
import type { TargetProbe } from './probe-attachment.js';

/**
 * Attaches probes chosen for one binary: USDT probes of the `postgresql` provider (every site,
 * libbpf handles the is-enabled semaphores), or uprobes/uretprobes on exported functions. pid -1
 * covers every backend, including those forked later. Links made before a failure are destroyed.
 *
 * @example
 * const links = attachTargetProbes(obj, target, [{ program: 'on_proc_sleep', symbol: 'ProcSleep', retprobe: false }]);
 */
export function attachTargetProbes(object: ProgramAttacher, target: PostmasterTarget, probes: TargetProbe[]): BpfLink[] {
  const links: BpfLink[] = [];
  try {
    for (const p of probes) {
      if ('usdt' in p) links.push(object.attachUsdt(p.program, -1, target.binaryPath, 'postgresql', p.usdt));
      else if ('fileOffset' in p) links.push(object.attachUprobe(p.program, false, -1, target.binaryPath, null, Number(p.fileOffset)));
      else links.push(object.attachUprobe(p.program, p.retprobe, -1, target.binaryPath, p.symbol, 0));
    }
  } catch (error) {
    for (const link of links) link.destroy();
    throw error;
  }
  return links;
}
