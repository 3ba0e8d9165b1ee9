import type { BpfObject } from '../native/bpf-native.js';
import type { KernelFeatures } from './kernel-features.js';

/**
 * Leaves unloaded every tp_btf program whose tracepoint this kernel lacks: such a program would
 * fail the whole object's load. The probe set that needs it reports itself unsupported
 * (src/families/). Call between open and load; returns the programs turned off.
 *
 * @example
 * const object = new (loadNative().BpfObject)(collectorObjectPath());
 * disableMissingTracepoints(object, KernelFeatures.host()); // [] on Linux 6.5+, ['on_blk_start'] before
 * object.load();
 */
export function disableMissingTracepoints(object: BpfObject, kernel: KernelFeatures): string[] {
  const disabled: string[] = [];
  for (const program of object.programs()) {
    const tracepoint = program.section.startsWith('tp_btf/') ? program.section.slice('tp_btf/'.length) : null;
    if (tracepoint && program.autoload && !kernel.hasTracepoint(tracepoint)) {
      object.setAutoload(program.name, false);
      disabled.push(program.name);
    }
  }
  return disabled;
}
