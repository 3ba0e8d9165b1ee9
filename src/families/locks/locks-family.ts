import { defineFamily } from '../family.js';
import { LOCK_PROBE_SETS, lockRodata } from './lock-probe-sets.js';
import { LockWaitsPart } from './lock-waits-part.js';

/** Heavyweight lock, LWLock and spinlock waits, by lock, tranche and query. */
export const locksFamily = defineFamily({
  name: 'locks',
  probeSets: LOCK_PROBE_SETS,
  columns: [{ column: 'spinlock_delays', field: 'spinlock_delays', unit: 'count', measuredBy: ['spinlock'] }],
  rodata: lockRodata,
  flushPart: ({ trancheNames }) => new LockWaitsPart(trancheNames),
});
