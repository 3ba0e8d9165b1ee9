import { LwlockMode } from '../../bpf/contract.js';

/*
 * Heavyweight lock tags and modes named as pg_locks names them (lockfuncs.c LockTagTypeNames,
 * lock.c lock_mode_names), so a row joins pg_locks' vocabulary directly. Values a later
 * Postgres may add show as "locktype <n>" / "mode <n>" rather than a wrong name.
 */
const LOCKTAG_TYPES = [
  'relation',
  'extend',
  'frozenid',
  'page',
  'tuple',
  'transactionid',
  'virtualxid',
  'spectoken',
  'object',
  'userlock',
  'advisory',
  'applytransaction',
];
const LOCK_MODES = [
  'INVALID',
  'AccessShareLock',
  'RowShareLock',
  'RowExclusiveLock',
  'ShareUpdateExclusiveLock',
  'ShareLock',
  'ShareRowExclusiveLock',
  'ExclusiveLock',
  'AccessExclusiveLock',
];
/** enum lwlock_mode (bpf/locks.bpf.h) as pg_stat_activity's users read it. */
const LWLOCK_MODES: Record<number, string> = {
  [LwlockMode.LWLOCK_MODE_EXCLUSIVE]: 'exclusive',
  [LwlockMode.LWLOCK_MODE_SHARED]: 'shared',
  [LwlockMode.LWLOCK_MODE_WAIT_UNTIL_FREE]: 'wait_until_free',
  [LwlockMode.LWLOCK_MODE_UNKNOWN]: 'unknown',
};

/**
 * pg_locks.locktype of a LockTagType value.
 *
 * @example
 * locktypeName(5); // 'transactionid'
 */
export function locktypeName(value: number): string {
  return LOCKTAG_TYPES[value] ?? `locktype ${value}`;
}

/**
 * pg_locks.mode of a LOCKMODE value.
 *
 * @example
 * lockModeName(7); // 'ExclusiveLock'
 */
export function lockModeName(value: number): string {
  return (value > 0 && LOCK_MODES[value]) || `mode ${value}`;
}

/**
 * An LWLockMode value; 'unknown' when the probe could not tell (semaphore sleeps without USDT).
 *
 * @example
 * lwlockModeName(1); // 'shared'
 */
export function lwlockModeName(value: number): string {
  return LWLOCK_MODES[value] ?? `mode ${value}`;
}
