import { defineFamily } from '../family.js';
import { LOCK_PROBE_SETS, lockRodata } from './lock-probe-sets.js';
import { LockWaitsPart } from './lock-waits-part.js';

/** Heavyweight lock, LWLock and spinlock waits, by lock, tranche and query. */
export const locksFamily = defineFamily({
  name: 'locks',
  probeSets: LOCK_PROBE_SETS,
  columns: [
    {
      column: 'spinlock_delays',
      field: 'spinlock_delays',
      unit: 'count',
      measuredBy: ['spinlock'],
      description:
        'Spin delays (count): the sleeps Postgres takes when spinning on a spinlock, an LWLock wait list or a buffer header did not get it; their time is in other_wait_ms. Probe set `spinlock`; NULL: not measured.',
    },
  ],
  rodata: lockRodata,
  flushPart: ({ trancheNames, lookupAndDelete, log }) => new LockWaitsPart(trancheNames, lookupAndDelete, log),
});
