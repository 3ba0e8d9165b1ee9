import { LwlockMode } from '../../src/bpf/contract.js';
import { describe, expect, it } from 'vitest';
import { lockModeName, locktypeName, lwlockModeName } from '../../src/families/locks/lock-names.js';
import { lockRodata } from '../../src/families/locks/lock-probe-sets.js';

describe('lock names', () => {
  it('names lock tag types and modes as pg_locks does, and says so when it cannot', () => {
    expect(locktypeName(0)).toBe('relation');
    expect(locktypeName(1)).toBe('extend');
    expect(locktypeName(4)).toBe('tuple');
    expect(locktypeName(5)).toBe('transactionid');
    expect(locktypeName(10)).toBe('advisory');
    expect(locktypeName(11)).toBe('applytransaction');
    expect(locktypeName(12)).toBe('locktype 12');
    expect(lockModeName(1)).toBe('AccessShareLock');
    expect(lockModeName(5)).toBe('ShareLock');
    expect(lockModeName(8)).toBe('AccessExclusiveLock');
    expect(lockModeName(0)).toBe('mode 0');
    expect(lockModeName(9)).toBe('mode 9');
  });

  it('names LWLock modes, and unknown where the probe cannot tell', () => {
    expect(lwlockModeName(0)).toBe('exclusive');
    expect(lwlockModeName(1)).toBe('shared');
    expect(lwlockModeName(2)).toBe('wait_until_free');
    expect(lwlockModeName(LwlockMode.LWLOCK_MODE_UNKNOWN)).toBe('unknown');
    expect(lwlockModeName(7)).toBe('mode 7');
  });

  it("tells the BPF side about PG17's dontWait argument of ProcSleep only on 17", () => {
    expect(lockRodata({ majorVersion: 16 })).toEqual({ proc_sleep_dont_wait_arg: 0 });
    expect(lockRodata({ majorVersion: 17 })).toEqual({ proc_sleep_dont_wait_arg: 3 });
    expect(lockRodata({ majorVersion: 18 })).toEqual({ proc_sleep_dont_wait_arg: 0 });
  });
});
