import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { KernelFeatures } from '../../src/collector/kernel-features.js';

// This host's kernel: its BTF and /proc/config.gz (the pure parts are in test/unit).
describe('KernelFeatures on this host', () => {
  it("knows this host's tracepoints from its BTF", () => {
    const host = KernelFeatures.host();
    expect(host.hasTracepoint('sched_switch')).toBe(true);
    expect(host.hasTracepoint('no_such_tracepoint_anywhere')).toBe(false);
  });

  it("reads a tracepoint's arguments from its BTF prototype: sched_switch's four (prev_state, 5.18+), sched_waking's one", () => {
    const host = KernelFeatures.host();
    expect(host.tracepointArgs('sched_switch')).toBe(4);
    expect(host.tracepointArgs('sched_waking')).toBe(1);
    expect(host.tracepointArgs('sched_process_fork')).toBe(2);
    expect(host.tracepointArgs('no_such_tracepoint_anywhere')).toBeNull();
  });

  it("measures the tick rate from /proc/timer_list when there is no config, matching this kernel's CONFIG_HZ", () => {
    const config = gunzipSync(readFileSync('/proc/config.gz')).toString('utf8');
    const configured = Number(config.match(/^CONFIG_HZ=(\d+)$/m)![1]);
    expect(new KernelFeatures(Buffer.alloc(0), () => null).hz()).toBe(configured);
  });
});
