import type { LwlockTrancheNames } from '../../postmaster/lwlock-tranche-names.js';
import { WAIT_EVENT_TABLE } from './wait-event-table.js';

/** A name and the first and last major versions (inclusive) that give it. */
type Versioned = [name: string, from: number, to: number];

/**
 * The names of wait_event_info values of every major version known, by class (the top byte)
 * and event id (the low 16 bits), each with the versions that name it so, exactly as their
 * pg_stat_activity shows them: read from each version's own binary by
 * scripts/gen-wait-event-names.sh and merged by scripts/merge-wait-event-names.mjs
 * (docs/wait-events.md says how and how it was checked).
 */
export interface VersionedWaitEventTable {
  /** The exact server_version_num read, per major. */
  serverVersionNums: Record<string, number>;
  classes: Record<string, { type: string; from: number; to: number; every?: Versioned[]; events?: Record<string, Versioned[]> }>;
}

/** One major version's names, by class and id: what VersionedWaitEventTable gives for that major. */
export interface WaitEventTable {
  serverVersionNum: number;
  classes: Record<string, { type: string; events: Map<number, string>; every?: string }>;
}

/** The tables made from WAIT_EVENT_TABLE so far, per major (a handful at most). */
const BY_MAJOR = new Map<number, WaitEventTable | undefined>();

/** `major`'s table out of the merged one; undefined for a major it does not cover. */
export function waitEventTable(major: number): WaitEventTable | undefined {
  if (!BY_MAJOR.has(major)) BY_MAJOR.set(major, tableOf(major, WAIT_EVENT_TABLE));
  return BY_MAJOR.get(major);
}

function tableOf(major: number, merged: VersionedWaitEventTable): WaitEventTable | undefined {
  const serverVersionNum = merged.serverVersionNums[major];
  if (serverVersionNum === undefined) return undefined;
  const inMajor = (ranges: Versioned[] | undefined) => ranges?.find(([, from, to]) => from <= major && major <= to)?.[0];
  const classes: WaitEventTable['classes'] = {};
  for (const [id, cls] of Object.entries(merged.classes)) {
    if (major < cls.from || major > cls.to) continue;
    const events = new Map<number, string>();
    for (const [eventId, ranges] of Object.entries(cls.events ?? {})) {
      const name = inMajor(ranges);
      if (name !== undefined) events.set(Number(eventId), name);
    }
    const every = inMajor(cls.every);
    classes[id] = every === undefined ? { type: cls.type, events } : { type: cls.type, events, every };
  }
  return { serverVersionNum, classes };
}

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
    this.table = waitEventTable(majorVersion);
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
    const name = cls.every ?? cls.events.get(eventId) ?? (classId === LWLOCK_CLASS ? this.trancheNames?.known(eventId) : undefined);
    return { type: cls.type, name: name ?? `#${eventId}` };
  }
}
