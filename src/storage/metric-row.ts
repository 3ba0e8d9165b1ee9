import type { MetricValue } from '../families/metric-values.js';

/** One query_stats row's increments. */
export interface QueryRow {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** Signed, as pg_stat_statements shows it. */
  queryid: string;
  /** In METRIC_COLUMNS order. */
  values: MetricValue[];
}

/** One backend_stats row's increments and identity. */
export interface BackendRow {
  pid: number;
  /** Microseconds since the Unix epoch. */
  backendStartUs: bigint;
  backendType: string;
  datid: number | null;
  usesysid: number | null;
  queryid: string | null;
  /** Its memory cgroup's path (a container's cgroup), null when unknown. */
  cgroup: string | null;
  values: MetricValue[];
  exitedAtUs: bigint | null;
}

/** One flush's rows for query_stats and backend_stats (and their history). */
export interface MetricRowSet {
  queries: QueryRow[];
  backends: BackendRow[];
}
