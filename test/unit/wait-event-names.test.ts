import { describe, expect, it } from 'vitest';
import { WaitEventNames } from '../../src/families/waits/wait-event-names.js';

/*
 * The per-version tables (generated from each version's binary, scripts/gen-wait-event-names.sh)
 * as pg_stat_activity shows them; the integration test checks 17+ against pg_wait_events. Facts
 * the tables must hold, taken from each version's documented wait events: where an id moved.
 */
const info = (cls: number, id: number) => ((cls << 24) | id) >>> 0;

describe('WaitEventNames', () => {
  it('names the same event by a different id where versions renumbered it', () => {
    // Timeout:PgSleep is id 1 on 14 and id 2 from 15 on (15 sorted the Timeout events by name);
    // IPC:SyncRep moved as IPC events were added before it.
    expect(new WaitEventNames(14).name(info(9, 1))).toEqual({ type: 'Timeout', name: 'PgSleep' });
    expect(new WaitEventNames(14).name(info(9, 2))).toEqual({ type: 'Timeout', name: 'RecoveryApplyDelay' });
    for (const major of [15, 16, 17, 18]) expect(new WaitEventNames(major).name(info(9, 2))).toEqual({ type: 'Timeout', name: 'PgSleep' });
    const syncRep = (major: number) =>
      Object.entries(Array.from({ length: 256 }, (_, id) => new WaitEventNames(major).name(info(8, id)).name)).find(
        ([, n]) => n === 'SyncRep',
      )?.[0];
    for (const major of [14, 15, 16, 17, 18]) expect(syncRep(major), `PostgreSQL ${major}`).toBeDefined();
    expect(new Set([14, 15, 16, 17, 18].map(syncRep)).size).toBeGreaterThan(1);
  });

  it('names heavyweight locks by their lock tag type and LWLocks by tranche', () => {
    expect(new WaitEventNames(15).name(info(3, 5))).toEqual({ type: 'Lock', name: 'transactionid' });
    expect(new WaitEventNames(15).name(info(1, 8))).toEqual({ type: 'LWLock', name: 'WALWrite' });
    // applytransaction exists from 16 on: 15 has no name for it.
    expect(new WaitEventNames(15).name(info(3, 11))).toEqual({ type: 'Lock', name: '#11' });
    expect(new WaitEventNames(16).name(info(3, 11))).toEqual({ type: 'Lock', name: 'applytransaction' });
  });

  it('shows an id or a class the version does not know as #n, never a guess', () => {
    expect(new WaitEventNames(17).name(info(7, 3))).toEqual({ type: 'Extension', name: '#3' });
    expect(new WaitEventNames(15).name(info(7, 3))).toEqual({ type: 'Extension', name: 'Extension' });
    expect(new WaitEventNames(15).name(info(11, 1))).toEqual({ type: '#11', name: '#1' });
    expect(new WaitEventNames(18).name(info(10, 250))).toEqual({ type: 'IO', name: '#250' });
    expect(new WaitEventNames(13).known).toBe(false);
    expect(new WaitEventNames(13).name(info(9, 2))).toEqual({ type: '#9', name: '#2' });
    // An LWLock tranche past the built-in ones: the postmaster's registered name, else its id.
    const registered = { known: (id: number) => (id === 200 ? 'pg_stat_statements' : null) };
    expect(new WaitEventNames(15, registered).name(info(1, 200))).toEqual({ type: 'LWLock', name: 'pg_stat_statements' });
    expect(new WaitEventNames(15, registered).name(info(1, 201))).toEqual({ type: 'LWLock', name: '#201' });
    expect(new WaitEventNames(15).name(0)).toEqual({ type: '', name: '' });
  });
});
