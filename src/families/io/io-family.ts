import { KernelFeatures } from '../../collector/kernel-features.js';
import { defineFamily } from '../family.js';
import { missingTracepoint } from '../missing-tracepoint.js';

/** Programs of each block and writeback tracepoint. */
const IO_PROGRAMS: Record<string, string[]> = {
  block_io_start: ['on_blk_start'],
  block_rq_merge: ['on_blk_merge'],
  block_rq_complete: ['on_blk_done'],
  balance_dirty_pages: ['on_dirty_pause'],
};
const IO_TRACEPOINTS = Object.keys(IO_PROGRAMS);

/** Block IO a backend created, and writeback throttling it suffered. */
export const ioFamily = defineFamily({
  name: 'io',
  probeSets: {
    io: {
      name: 'io',
      description: 'block IO requests, bytes and latency of the requests a backend created, writeback throttling pauses',
      default: true,
      whereSupported: true,
      unsupportedReason: () =>
        missingTracepoint(IO_TRACEPOINTS) ??
        (KernelFeatures.host().hz() === null ? 'the kernel tick rate (CONFIG_HZ) is unknown: no kernel config, no /proc/timer_list' : null),
      attachments: IO_TRACEPOINTS.flatMap((tp) => IO_PROGRAMS[tp]!.map((program) => ({ program, kind: 'auto' as const }))),
      cost: 'two tp_btf events per block request on the host (start, completion), one per request merge and per writeback throttling round',
    },
  },
  columns: [
    { column: 'writeback_throttle_ms', field: 'writeback_throttle_ns', unit: 'ns', measuredBy: ['io'] },
    { column: 'blk_read_ios', field: 'blk_read_ios', unit: 'count', measuredBy: ['io'] },
    { column: 'blk_read_bytes', field: 'blk_read_bytes', unit: 'count', measuredBy: ['io'] },
    { column: 'blk_write_ios', field: 'blk_write_ios', unit: 'count', measuredBy: ['io'] },
    { column: 'blk_write_bytes', field: 'blk_write_bytes', unit: 'count', measuredBy: ['io'] },
  ],
});
