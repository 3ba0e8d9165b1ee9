import type { LwlockTrancheNames } from '../../postmaster/lwlock-tranche-names.js';
import { PG14 } from './names/pg14.js';
import { PG15 } from './names/pg15.js';
import { PG16 } from './names/pg16.js';
import { PG17 } from './names/pg17.js';
import { PG18 } from './names/pg18.js';

/**
 * One major version's names of wait_event_info values, by class (the top byte) and event id (the
 * low 16 bits), exactly as its pg_stat_activity shows them: generated from that version's own
 * binary by scripts/gen-wait-event-names.sh (docs/wait-events.md says how and how it was checked).
 */
export interface WaitEventTable {
  serverVersionNum: number;
  classes: Record<string, { type: string; events?: Record<string, string>; every?: string }>;
}

const TABLES: Record<number, WaitEventTable> = { 14: PG14, 15: PG15, 16: PG16, 17: PG17, 18: PG18 };

/** A wait event as pg_stat_activity names it; both '' for a sleep without one (wait_event_info 0). */
export interface WaitEventName {
  type: string;
  name: string;
}

/** The LWLock class: its event ids are tranche ids. */
const LWLOCK_CLASS = 1;

/**
 * Names wait_event_info values as pg_stat_activity of `majorVersion` does. An id the version's
 * table does not know is shown as `#<id>` in its class (`Extension:#3`, a custom event of 17+), a
 * class it does not know as `#<class>`: never a name it might not be. LWLock tranche ids past the
 * built-in ones are named from the tranches extensions registered in the postmaster, when known.
 *
 * @example
 * const names = new WaitEventNames(15);
 * names.name(0x09000002); // { type: 'Timeout', name: 'PgSleep' }
 */
export class WaitEventNames {
  private readonly table: WaitEventTable | undefined;

  constructor(
    readonly majorVersion: number,
    private readonly trancheNames?: Pick<LwlockTrancheNames, 'known'>,
  ) {
    this.table = TABLES[majorVersion];
  }

  /** Whether this version has a table (PostgreSQL 14-18); without one every event shows as ids. */
  get known(): boolean {
    return this.table !== undefined;
  }

  name(waitEventInfo: number): WaitEventName {
    if (waitEventInfo === 0) return { type: '', name: '' };
    const classId = waitEventInfo >>> 24;
    const eventId = waitEventInfo & 0xffff;
    const cls = this.table?.classes[classId];
    if (!cls) return { type: `#${classId}`, name: `#${eventId}` };
    const name = cls.every ?? cls.events?.[eventId] ?? (classId === LWLOCK_CLASS ? this.trancheNames?.known(eventId) : undefined);
    return { type: cls.type, name: name ?? `#${eventId}` };
  }
}
