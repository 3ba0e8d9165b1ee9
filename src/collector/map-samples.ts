/** Raw cumulative sample of one tracked process (bpf/records.h, struct backend_record). */
export interface BackendSample {
  pid: number;
  metrics: bigint[];
  queryid: bigint;
  backendStartUs: bigint;
  taskStartNs: bigint;
  exitedNs: bigint;
  userid: number;
  dbid: number;
  backendType: number;
  identityKnown: boolean;
}

/** Raw cumulative sample of one query key, summed over CPUs. */
export interface QuerySample {
  userid: number;
  dbid: number;
  toplevel: boolean;
  queryid: bigint;
  metrics: bigint[];
}

/** Entries in one bounded map against its capacity (bpf_stats.health.map_fill). */
export interface MapFill {
  map: string;
  entries: number;
  maxEntries: number;
}
