/** The probe sets a DBA can switch on; `cpu` is always on. */
export type ProbeSetName = 'cpu' | 'query' | 'memory' | 'io' | 'locks' | 'lwlock' | 'spinlock' | 'latency' | 'sched' | 'llc';

/** How one column of query_stats / backend_stats is filled from `struct metrics` (bpf/pgstats.h). */
export interface MetricColumn {
  column: string;
  /** Member of struct metrics. */
  field: string;
  /** ns fields become milliseconds; counts stay integers. */
  unit: 'ns' | 'count';
  /** The column is NULL unless one of these sets is attached. */
  measuredBy: ProbeSetName[];
}

export const METRIC_COLUMNS: readonly MetricColumn[] = [
  { column: 'calls', field: 'calls', unit: 'count', measuredBy: ['query'] },
  { column: 'total_time_ms', field: 'total_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'on_cpu_ms', field: 'on_cpu_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'runq_wait_ms', field: 'runq_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'io_wait_ms', field: 'io_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'lock_wait_ms', field: 'lock_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'lwlock_wait_ms', field: 'lwlock_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'reclaim_ms', field: 'reclaim_ns', unit: 'ns', measuredBy: ['memory'] },
  { column: 'other_wait_ms', field: 'other_wait_ns', unit: 'ns', measuredBy: ['cpu'] },
  { column: 'minflt', field: 'minflt', unit: 'count', measuredBy: ['cpu'] },
  { column: 'majflt', field: 'majflt', unit: 'count', measuredBy: ['cpu'] },
  { column: 'cpu_migrations', field: 'cpu_migrations', unit: 'count', measuredBy: ['cpu'] },
  { column: 'nvcsw', field: 'nvcsw', unit: 'count', measuredBy: ['cpu'] },
  { column: 'nivcsw', field: 'nivcsw', unit: 'count', measuredBy: ['cpu'] },
  // Issue 3's families: NULL until the probe set that fills each is named here.
  { column: 'reclaim_pages', field: 'reclaim_pages', unit: 'count', measuredBy: ['memory'] },
  { column: 'compaction_stall_ms', field: 'compaction_ns', unit: 'ns', measuredBy: ['memory'] },
  { column: 'writeback_throttle_ms', field: 'writeback_throttle_ns', unit: 'ns', measuredBy: ['io'] },
  { column: 'blk_read_ios', field: 'blk_read_ios', unit: 'count', measuredBy: ['io'] },
  { column: 'blk_read_bytes', field: 'blk_read_bytes', unit: 'count', measuredBy: ['io'] },
  { column: 'blk_write_ios', field: 'blk_write_ios', unit: 'count', measuredBy: ['io'] },
  { column: 'blk_write_bytes', field: 'blk_write_bytes', unit: 'count', measuredBy: ['io'] },
  { column: 'llc_references', field: 'llc_references', unit: 'count', measuredBy: ['llc'] },
  { column: 'llc_misses', field: 'llc_misses', unit: 'count', measuredBy: ['llc'] },
  { column: 'spinlock_delays', field: 'spinlock_delays', unit: 'count', measuredBy: ['spinlock'] },
];

/** A column's value for one flush: ms as a number, counts as a bigint, or null when not measured. */
export type MetricValue = number | bigint | null;

/** Turns raw deltas (in METRIC_COLUMNS order) into column values for the active probe sets. */
export function toColumnValues(deltas: readonly bigint[], active: ReadonlySet<ProbeSetName>): MetricValue[] {
  return METRIC_COLUMNS.map((c, i) => {
    if (!c.measuredBy.some((set) => active.has(set))) return null;
    const delta = deltas[i] ?? 0n;
    return c.unit === 'ns' ? Number(delta) / 1e6 : delta;
  });
}
