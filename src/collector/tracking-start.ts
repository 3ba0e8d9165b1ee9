import type { ObjectGlobals } from './object-globals.js';
import { postgresTimestampNow } from '../postgres-timestamp.js';

/**
 * Marks now as the start of collection, after load and at each resume: on the monotonic clock
 * for the cpu family (tasks forked later count from their fork, older ones from their next
 * switch), and on Postgres' own clock for the latency set (a statement that ended before it is
 * not observed, bpf/latency.bpf.h).
 */
export function markTrackingStart(globals: ObjectGlobals): void {
  globals.writeBss('tracking_since_ns', process.hrtime.bigint());
  globals.writeBss('tracking_since_pg_us', postgresTimestampNow());
}
