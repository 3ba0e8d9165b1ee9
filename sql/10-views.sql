-- Views over bpf_stats. Re-applied (CREATE OR REPLACE) when sql/ changed or a migration ran,
-- so they follow the tables the migrations own.

-- Live backends, with what the kernel saw them do.
CREATE OR REPLACE VIEW bpf_stats.activity AS
SELECT b.node, a.pid, a.backend_type, a.datname, a.usename, a.state, a.wait_event_type, a.wait_event,
       a.query_id, a.query, a.backend_start,
       b.total_time_ms, b.on_cpu_ms, b.runq_wait_ms, b.io_wait_ms, b.lock_wait_ms,
       b.lwlock_wait_ms, b.reclaim_ms, b.other_wait_ms, b.minflt, b.majflt,
       b.cpu_migrations, b.nvcsw, b.nivcsw, b.last_seen
  FROM pg_stat_activity a
  LEFT JOIN bpf_stats.backend_stats b
    ON b.pid = a.pid AND b.exited_at IS NULL AND b.node IN (SELECT bpf_stats.local_nodes())
   AND b.backend_start BETWEEN a.backend_start - interval '1 second' AND a.backend_start + interval '1 second';

-- Where each query's time went, and each part's share of the total. on_cpu, runq_wait,
-- io_wait, lock_wait, lwlock_wait and other_wait partition total_time_ms (their shares sum to
-- 1); reclaim_ms is not part of that partition (NULL unless its family measures it).
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_time AS
  SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, %s AS query, q.calls, q.total_time_ms,
         q.on_cpu_ms, q.runq_wait_ms, q.io_wait_ms, q.lock_wait_ms, q.lwlock_wait_ms,
         q.reclaim_ms, q.other_wait_ms,
         q.on_cpu_ms      / nullif(q.total_time_ms, 0) AS on_cpu_share,
         q.runq_wait_ms   / nullif(q.total_time_ms, 0) AS runq_wait_share,
         q.io_wait_ms     / nullif(q.total_time_ms, 0) AS io_wait_share,
         q.lock_wait_ms   / nullif(q.total_time_ms, 0) AS lock_wait_share,
         q.lwlock_wait_ms / nullif(q.total_time_ms, 0) AS lwlock_wait_share,
         q.reclaim_ms     / nullif(q.total_time_ms, 0) AS reclaim_share,
         q.other_wait_ms  / nullif(q.total_time_ms, 0) AS other_wait_share,
         q.stats_since, q.last_seen
    FROM bpf_stats.query_stats q %s
$sql$);
