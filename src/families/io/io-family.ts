import { KernelFeatures } from '../../collector/kernel-features.js';
import type { ProgramName } from '../../bpf/contract.js';
import { tracepointOf } from '../../bpf/program-tracepoint.js';
import { defineFamily } from '../family.js';
import { missingTracepoint } from '../missing-tracepoint.js';
import { AIO_PROBE_SET } from './aio-probe-set.js';

/** The block request and writeback throttling programs (their tracepoints are in their ELF sections). */
const IO_PROGRAMS: readonly ProgramName[] = ['on_blk_start', 'on_blk_merge', 'on_blk_done', 'on_dirty_pause'];
const IO_TRACEPOINTS = IO_PROGRAMS.map(tracepointOf);

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
      attachments: IO_PROGRAMS.map((program) => ({ program, kind: 'auto' as const })),
      cost: 'two tp_btf events per block request on the host (start, completion), one per request merge and per writeback throttling round',
    },
    aio: AIO_PROBE_SET,
  },
  columns: [
    {
      column: 'writeback_throttle_ms',
      field: 'writeback_throttle_ns',
      unit: 'ns',
      measuredBy: ['io'],
      alreadyCounted: true,
      description:
        'Of which, never add to the partition: milliseconds paused by writeback throttling (balance_dirty_pages), already counted in io_wait_ms. Probe set `io`; NULL: not measured.',
    },
    {
      column: 'blk_read_ios',
      field: 'blk_read_ios',
      unit: 'count',
      measuredBy: ['io'],
      description:
        'Block read requests this process created (count): reads that missed the page cache, O_DIRECT; charged when they complete. Page-cache hits are not block IO. Probe set `io`; NULL: not measured.',
    },
    {
      column: 'blk_read_bytes',
      field: 'blk_read_bytes',
      unit: 'count',
      measuredBy: ['io'],
      description: 'Bytes of the block read requests in blk_read_ios. Probe set `io`; NULL: not measured.',
    },
    {
      column: 'blk_write_ios',
      field: 'blk_write_ios',
      unit: 'count',
      measuredBy: ['io'],
      description:
        "Block write requests this process created (count): its own fsync/fdatasync (the WAL at commit), *_flush_after writeback, O_DIRECT; charged when they complete. Dirty pages the kernel's flusher writes back later belong to no process. Probe set `io`; NULL: not measured.",
    },
    {
      column: 'blk_write_bytes',
      field: 'blk_write_bytes',
      unit: 'count',
      measuredBy: ['io'],
      description: 'Bytes of the block write requests in blk_write_ios. Probe set `io`; NULL: not measured.',
    },
  ],
});
