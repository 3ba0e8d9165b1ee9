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

  it("measures the tick rate from /proc/timer_list when there is no config, matching this kernel's CONFIG_HZ", () => {
    const config = gunzipSync(readFileSync('/proc/config.gz')).toString('utf8');
    const configured = Number(config.match(/^CONFIG_HZ=(\d+)$/m)![1]);
    expect(new KernelFeatures(Buffer.alloc(0), () => null).hz()).toBe(configured);
  });
});
