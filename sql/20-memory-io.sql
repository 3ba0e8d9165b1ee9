-- The memory and IO families (probe sets `memory` and `io`). Re-applied (CREATE OR REPLACE)
-- when sql/ changed or a migration ran.
--
-- reclaim_ms, compaction_stall_ms and writeback_throttle_ms are OVERLAY figures: wall time the
-- backend spent inside direct/memcg reclaim, direct compaction, or a balance_dirty_pages pause.
-- That time is already inside total_time_ms and already counted by the time partition
-- (on_cpu_ms + runq_wait_ms + io_wait_ms + lock_wait_ms + lwlock_wait_ms + other_wait_ms):
-- reclaim and compaction mostly run on the CPU (or wait in the run queue, or sleep on
-- writeback), and a writeback pause is an IO sleep counted in io_wait_ms. Read them as
-- "of which", never add them to the partition.
--
-- blk_* count the block requests a backend created itself (reads that missed the page cache,
-- its own fsync/fdatasync and sync_file_range writes, O_DIRECT), charged when they complete,
-- whichever context completes them. Dirty pages the kernel's flusher writes back later belong to
-- no backend and are not counted here.

-- Memory stalls per query. Page faults come from the cpu set (task counters).
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_memory AS
  SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, %s AS query, q.calls,
         q.reclaim_ms, q.reclaim_pages, q.compaction_stall_ms, q.minflt, q.majflt,
         q.reclaim_ms / nullif(q.total_time_ms, 0) AS reclaim_fraction,
         q.reclaim_ms          / nullif(q.calls, 0) AS reclaim_ms_per_call,
         q.compaction_stall_ms / nullif(q.calls, 0) AS compaction_stall_ms_per_call,
         q.majflt::double precision / nullif(q.calls, 0) AS majflt_per_call,
         q.total_time_ms, q.stats_since, q.last_seen
    FROM bpf_stats.query_stats q %s
$sql$);

-- Block IO per query. io_wait_ms is the cpu set's sleep time in IO waits.
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_io AS
  SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, %s AS query, q.calls,
         q.blk_read_ios, q.blk_read_bytes, q.blk_write_ios, q.blk_write_bytes,
         q.io_wait_ms, q.writeback_throttle_ms,
         q.blk_read_bytes::double precision  / nullif(q.blk_read_ios, 0)  AS avg_read_bytes,
         q.blk_write_bytes::double precision / nullif(q.blk_write_ios, 0) AS avg_write_bytes,
         q.io_wait_ms / nullif(q.total_time_ms, 0) AS io_wait_fraction,
         q.blk_read_bytes::double precision  / nullif(q.calls, 0) AS read_bytes_per_call,
         q.blk_write_bytes::double precision / nullif(q.calls, 0) AS write_bytes_per_call,
         q.total_time_ms, q.stats_since, q.last_seen
    FROM bpf_stats.query_stats q %s
$sql$);

-- Memory pressure per container: the processes of each memory cgroup (backend_stats.cgroup),
-- summed. A container's memory limit is set on its cgroup, so its reclaim is read here; sums
-- are NULL where the family was off for every process of the cgroup.
CREATE OR REPLACE VIEW bpf_stats.cgroup_memory AS
SELECT b.node, b.cgroup,
       count(*) AS processes,
       count(*) FILTER (WHERE b.exited_at IS NULL) AS live_processes,
       sum(b.reclaim_ms) AS reclaim_ms, sum(b.reclaim_pages) AS reclaim_pages,
       sum(b.compaction_stall_ms) AS compaction_stall_ms, sum(b.writeback_throttle_ms) AS writeback_throttle_ms,
       sum(b.minflt) AS minflt, sum(b.majflt) AS majflt,
       sum(b.blk_read_bytes) AS blk_read_bytes, sum(b.blk_write_bytes) AS blk_write_bytes,
       sum(b.on_cpu_ms) AS on_cpu_ms,
       max(b.last_seen) AS last_seen
  FROM bpf_stats.backend_stats b
 WHERE b.cgroup IS NOT NULL
 GROUP BY b.node, b.cgroup;
