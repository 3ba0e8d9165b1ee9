import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
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

  it("knows this host's tracepoints from its BTF", () => {
    const host = KernelFeatures.host();
    expect(host.hasTracepoint('sched_switch')).toBe(true);
    expect(host.hasTracepoint('no_such_tracepoint_anywhere')).toBe(false);
  });

  it("measures the tick rate from /proc/timer_list when there is no config, matching this kernel's CONFIG_HZ", () => {
    const config = gunzipSync(readFileSync('/proc/config.gz')).toString('utf8');
    const configured = Number(config.match(/^CONFIG_HZ=(\d+)$/m)![1]);
    expect(new KernelFeatures(Buffer.alloc(0), () => null).hz()).toBe(configured);
  });
});
