import { KernelFeatures } from '../collector/kernel-features.js';

/**
 * Why a set needing `tracepoints` cannot run on this kernel, or null.
 *
 * @example
 * missingTracepoint(['block_io_start']); // 'this kernel has no tracepoint block_io_start (added in Linux 6.5)' before 6.5
 */
export function missingTracepoint(tracepoints: readonly string[]): string | null {
  const name = KernelFeatures.host().missingTracepoint(tracepoints);
  if (name === null) return null;
  const since = name.startsWith('block_io_') ? ' (added in Linux 6.5)' : '';
  return `this kernel has no tracepoint ${name}${since}`;
}
