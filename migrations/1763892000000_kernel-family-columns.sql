-- Up Migration

-- Columns of the kernel metric families that the first migration did not have. NULL means
-- "not measured" (the probe set that fills the column is off or unsupported here).
ALTER TABLE bpf_stats.query_stats
  ADD COLUMN reclaim_pages         bigint,
  ADD COLUMN compaction_stall_ms   double precision,
  ADD COLUMN writeback_throttle_ms double precision,
  ADD COLUMN spinlock_delays       bigint;

ALTER TABLE bpf_stats.backend_stats
  ADD COLUMN reclaim_pages         bigint,
  ADD COLUMN compaction_stall_ms   double precision,
  ADD COLUMN writeback_throttle_ms double precision,
  ADD COLUMN spinlock_delays       bigint;

-- Down Migration

ALTER TABLE bpf_stats.backend_stats
  DROP COLUMN reclaim_pages, DROP COLUMN compaction_stall_ms,
  DROP COLUMN writeback_throttle_ms, DROP COLUMN spinlock_delays;
ALTER TABLE bpf_stats.query_stats
  DROP COLUMN reclaim_pages, DROP COLUMN compaction_stall_ms,
  DROP COLUMN writeback_throttle_ms, DROP COLUMN spinlock_delays;
