import type { ObjectGlobals } from './object-globals.js';
import { postgresTimestampNotBeforeNow } from '../postgres-timestamp.js';

/**
 * Marks now as the start of collection, after load and at each resume (before anything is
 * attached): on the monotonic clock for the cpu family (tasks forked later count from their
 * fork, older ones from their next switch), and on Postgres' own clock for the latency set (a
 * statement that ended before it is not observed, bpf/latency.bpf.h). The latter is rounded up
 * to the millisecond, so that a statement that ended just before it does not count; one that
 * ends after the attach but within that millisecond is left out too.
 */
export function markTrackingStart(globals: ObjectGlobals): void {
  globals.writeBss('tracking_since_ns', process.hrtime.bigint());
  globals.writeBss('tracking_since_pg_us', postgresTimestampNotBeforeNow());
}
