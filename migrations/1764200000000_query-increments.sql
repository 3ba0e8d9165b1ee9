-- Up Migration

-- What a flush sends per query key, as ONE binary array of this row type, for query_stats and
-- its history: unnest() of one array of rows cost the server less than half of what unnest() of one
-- array per column did (28 arrays of 10,000 elements: 46-57 ms; one array of 10,000 rows:
-- 21-23 ms, bind included). The key columns, then the metric columns in the order of
-- METRIC_COLUMNS (src/families/index.ts); test/integration/binary-array.test.ts fails when the
-- two differ, so a migration adding a metric column adds it here too.
CREATE TYPE bpf_stats.query_increments AS (
  userid oid,
  dbid oid,
  toplevel bool,
  queryid int8,
  total_time_ms float8,
  on_cpu_ms float8,
  runq_wait_ms float8,
  io_wait_ms float8,
  lock_wait_ms float8,
  lwlock_wait_ms float8,
  other_wait_ms float8,
  minflt int8,
  majflt int8,
  cpu_migrations int8,
  nvcsw int8,
  nivcsw int8,
  calls int8,
  spinlock_delays int8,
  reclaim_ms float8,
  reclaim_pages int8,
  compaction_stall_ms float8,
  writeback_throttle_ms float8,
  blk_read_ios int8,
  blk_read_bytes int8,
  blk_write_ios int8,
  blk_write_bytes int8,
  llc_references int8,
  llc_misses int8
);

-- Down Migration

DROP TYPE bpf_stats.query_increments;
