import type { HistogramRow } from './histogram-deltas.js';
import type { MetricValue } from './metric-columns.js';

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
  values: MetricValue[];
  exitedAtUs: bigint | null;
}

/**
 * What one flush writes, and what to do once it is written: move the delta baselines and
 * forget exited processes. Nothing is committed when the write fails, so the next flush
 * carries the same increments again.
 */
export interface FlushBatch {
  queries: QueryRow[];
  backends: BackendRow[];
  /** Per-query histogram increments (bpf_stats.query_histograms); absent = none. */
  histograms?: HistogramRow[];
  commit(): void;
}
