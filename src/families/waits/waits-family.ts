import { defineFamily } from '../family.js';
import { WaitEventNames } from './wait-event-names.js';
import { WaitEventsPart } from './wait-events-part.js';

/**
 * Off-CPU time per PostgreSQL wait event, per query and per backend. No probe set of its own:
 * the cpu set's switch-out charges each sleep to its wait event too (bpf/wait-events.bpf.h);
 * this family names the ids for the server's version and writes the tables.
 */
export const waitsFamily = defineFamily({
  name: 'waits',
  probeSets: {},
  columns: [],
  flushPart: ({ target, trancheNames, lookupAndDelete, backendRowKey, log }) =>
    new WaitEventsPart(new WaitEventNames(target.majorVersion, trancheNames), lookupAndDelete, log, backendRowKey),
});
