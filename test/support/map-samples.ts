import type { CounterName } from '../../src/bpf/counters.js';
import type { BackendSample, MapFill, QuerySample } from '../../src/collector/map-samples.js';
import { MapSnapshot } from '../../src/collector/map-snapshot.js';
import { METRIC_COLUMNS, type MetricColumnName } from '../../src/families/index.js';
import { exactInt, type ExactInt } from '../../src/exact-int.js';

/*
 * Samples as MapReaders decodes them from the BPF maps, for the unit tests of what a flush
 * makes of them (MetricRows and its neighbours), without loading BPF.
 */

/** Cumulative raw figures in METRIC_COLUMNS order (ns for times), as the maps' decoders give them: 0 but for `values`. */
export function metrics(values: Partial<Record<MetricColumnName, number | bigint>> = {}): ExactInt[] {
  return METRIC_COLUMNS.map((c) => exactInt(BigInt(values[c.column] ?? 0)));
}

/** A live client backend of user 10 in database 5 whose identity BPF read, as `fields` change it. */
export function backendSample(fields: Partial<BackendSample> & { pid: number }): BackendSample {
  return {
    key: fields.pid,
    retired: false,
    metrics: metrics(),
    queryid: 0n,
    backendStartUs: 1000n,
    taskStartNs: 1n,
    exitedNs: 0n,
    userid: 10,
    dbid: 5,
    backendType: 0,
    identityKnown: true,
    memoryCgroup: 0n,
    clientWaits: 0n,
    clientWaitNs: 0n,
    unclassedNs: 0n,
    waitSlots: [],
    ...fields,
  };
}

/** A top-level statement of user 10 in database 5 that ran `calls` times; its raw key is its id's low byte. */
export function querySample(queryid: number, calls: number): QuerySample {
  return {
    userid: 10,
    dbid: 5,
    toplevel: true,
    queryid: BigInt(queryid),
    metrics: metrics({ calls }),
    waitSlots: [],
    rawKey: Buffer.from([queryid & 0xff]),
  };
}

/**
 * One read of the maps holding these samples; any other map read throws. `queriesComplete`
 * false: `queries` are only the keys that changed (the map holds others).
 */
export function snapshotOf({
  backends = [],
  queries = [],
  queriesComplete = true,
  counters = {},
  fill = [],
}: {
  backends?: BackendSample[];
  queries?: QuerySample[];
  queriesComplete?: boolean;
  counters?: Partial<Record<CounterName, bigint>>;
  fill?: MapFill[];
}): MapSnapshot {
  return new MapSnapshot(backends, queries, queriesComplete, [], counters as Record<CounterName, bigint>, fill, () => {
    throw new Error('not read');
  });
}
