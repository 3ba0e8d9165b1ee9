import type { ColumnType, Generated } from 'kysely';

/** Columns shared by query_stats and backend_stats (see migrations/). */
export interface MetricColumns {
  calls: number | string | null;
  total_time_ms: number;
  on_cpu_ms: number;
  runq_wait_ms: number;
  io_wait_ms: number;
  lock_wait_ms: number;
  lwlock_wait_ms: number;
  reclaim_ms: number | null;
  other_wait_ms: number;
  minflt: ColumnType<string, number | string, number | string>;
  majflt: ColumnType<string, number | string, number | string>;
  blk_read_ios: string | null;
  blk_read_bytes: string | null;
  blk_write_ios: string | null;
  blk_write_bytes: string | null;
  llc_references: string | null;
  llc_misses: string | null;
  cpu_migrations: ColumnType<string, number | string, number | string>;
  nvcsw: ColumnType<string, number | string, number | string>;
  nivcsw: ColumnType<string, number | string, number | string>;
  reclaim_pages: string | null;
  compaction_stall_ms: number | null;
  writeback_throttle_ms: number | null;
  spinlock_delays: string | null;
}

export interface QueryStatsTable extends MetricColumns {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** bigint: pg returns it as a string to keep all 64 bits. */
  queryid: string;
  stats_since: Generated<Date>;
  last_seen: Date;
}

export interface BackendStatsTable extends MetricColumns {
  pid: number;
  backend_start: Date;
  backend_type: string;
  datid: number | null;
  usesysid: number | null;
  queryid: string | null;
  last_seen: Date;
  exited_at: Date | null;
}

/** The bpf_stats schema as kysely sees it. */
export interface BpfStatsDatabase {
  'bpf_stats.query_stats': QueryStatsTable;
  'bpf_stats.backend_stats': BackendStatsTable;
}
