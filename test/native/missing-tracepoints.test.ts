import { describe, expect, it } from 'vitest';
import { collectorObjectPath } from '../../src/collector/collector-object.js';
import { disableMissingTracepoints } from '../../src/collector/disable-missing-tracepoints.js';
import { KernelFeatures } from '../../src/collector/kernel-features.js';
import { loadNative } from '../../src/native/bpf-native.js';

/** This kernel, minus the tracepoints named: what an older kernel looks like to the loader. */
class KernelWithout extends KernelFeatures {
  constructor(private readonly absent: string[]) {
    super(Buffer.alloc(0));
  }

  override hasTracepoint(name: string): boolean {
    return !this.absent.includes(name) && KernelFeatures.host().hasTracepoint(name);
  }
}

describe('a kernel without some tracepoints', () => {
  it('loads the real collector object with those programs left out instead of failing', () => {
    const object = new (loadNative().BpfObject)(collectorObjectPath());
    try {
      const disabled = disableMissingTracepoints(object, new KernelWithout(['block_io_start', 'mm_compaction_end']));
      expect(disabled.sort()).toEqual(['on_blk_start', 'on_compact_end']);
      object.load(); // the verifier still sees, and accepts, every other program
      const loaded = object
        .programs()
        .filter((p) => p.autoload)
        .map((p) => p.name);
      expect(loaded).toEqual(expect.arrayContaining(['on_sched_switch', 'on_blk_merge', 'on_blk_done', 'on_mreclaim_end']));
      expect(loaded).not.toContain('on_blk_start');
    } finally {
      object.close();
    }
  });

  it('loads everything on this kernel, which has all of them', () => {
    const object = new (loadNative().BpfObject)(collectorObjectPath());
    try {
      expect(disableMissingTracepoints(object, KernelFeatures.host())).toEqual([]);
      object.load();
    } finally {
      object.close();
    }
  });
});
