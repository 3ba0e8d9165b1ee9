import { Structs } from '../../src/bpf/contract.js';
import { dumpOwnMap } from './own-bpf.js';

const { pid: PID, start_bytes: START_BYTES, counted_bytes: COUNTED_BYTES } = Structs.io_owner.fields;

/**
 * Bytes of `pid`'s block requests (its own, or an io worker's performed for it) whose completion
 * no BPF program saw (bpf/io.bpf.h says when the kernel skips it). io_inflight holds them until
 * their request struct is reused, and charges them then (struct io_owner in bpf/io.bpf.h):
 * charged late, not lost, but not yet when a test reads the figures right after its IO. `pid` as
 * the kernel numbers it; `collector`: the process whose maps to read (this one by default).
 *
 * @example
 * const unseen = unseenCompletions(pid);
 * expect(Number(row.blk_read_bytes) + unseen.bytes).toBe(tracedBytes);
 */
export function unseenCompletions(pid: number, collector: number | 'self' = 'self'): { bytes: number; requests: number } {
  let bytes = 0;
  let requests = 0;
  for (const { values } of dumpOwnMap('io_inflight', collector)) {
    const v = values[0]!;
    if (v.readUInt32LE(PID.offset) !== pid) continue;
    bytes += v.readUInt32LE(START_BYTES.offset) - v.readUInt32LE(COUNTED_BYTES.offset);
    requests++;
  }
  return { bytes, requests };
}
