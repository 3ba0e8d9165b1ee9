import { describe, expect, it } from 'vitest';
import { KernelFeatures } from '../../src/collector/kernel-features.js';

describe('KernelFeatures', () => {
  it('finds a tracepoint only by its whole btf_trace_ type name', () => {
    const kernel = new KernelFeatures(Buffer.from('\0int\0btf_trace_block_io_start\0btf_trace_sched_switch_x\0'), () => null);
    expect(kernel.hasTracepoint('block_io_start')).toBe(true);
    expect(kernel.hasTracepoint('block_io')).toBe(false);
    expect(kernel.hasTracepoint('sched_switch')).toBe(false);
    expect(kernel.missingTracepoint(['block_io_start', 'block_io_done'])).toBe('block_io_done');
    expect(kernel.missingTracepoint(['block_io_start'])).toBeNull();
  });

  it('reads CONFIG_HZ from the kernel config', () => {
    expect(new KernelFeatures(Buffer.alloc(0), () => '# comment\nCONFIG_HZ_300=y\nCONFIG_HZ=300\n').hz()).toBe(300);
  });
});
