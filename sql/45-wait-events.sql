-- Wait event views: off-CPU time per PostgreSQL wait event, shaped like pg_wait_sampling's
-- profile so its users find their way. Re-applied when sql/ changed or a migration ran.
--
--   query_wait_events    per query and wait event: waits and exact time asleep in it
--   backend_wait_events  the same per backend (pid, backend_start), idle time included
--
-- In both, the row whose wait_event_type and wait_event are NULL is the time with no wait event
-- (pg_wait_sampling's "no wait" samples): on CPU, waiting for a CPU (run queue), and asleep
-- without a wait event set (a page fault's read, reclaim).

CREATE OR REPLACE VIEW bpf_stats.query_wait_events AS
SELECT w.node, w.userid, w.dbid, w.toplevel, w.queryid, w.wait_event_type, w.wait_event,
       w.waits, w.wait_time_ms, w.runq_after_ms, w.stats_since, w.last_seen
  FROM bpf_stats.query_wait_event_stats w
 WHERE w.wait_event_type <> ''
UNION ALL
SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, NULL::text, NULL::text,
       coalesce(n.waits, 0), q.on_cpu_ms + q.runq_wait_ms + coalesce(n.wait_time_ms, 0), NULL::float8,
       q.stats_since, q.last_seen
  FROM bpf_stats.query_stats q
  LEFT JOIN bpf_stats.query_wait_event_stats n
    ON (n.node, n.userid, n.dbid, n.toplevel, n.queryid, n.wait_event_type) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid, '')
 WHERE q.on_cpu_ms IS NOT NULL;

CREATE OR REPLACE VIEW bpf_stats.backend_wait_events AS
SELECT w.node, w.pid, w.backend_start, b.backend_type, w.wait_event_type, w.wait_event,
       w.waits, w.wait_time_ms, w.runq_after_ms, w.stats_since, w.last_seen
  FROM bpf_stats.backend_wait_event_stats w
  LEFT JOIN bpf_stats.backend_stats b ON (b.node, b.pid, b.backend_start) = (w.node, w.pid, w.backend_start)
 WHERE w.wait_event_type <> ''
UNION ALL
SELECT b.node, b.pid, b.backend_start, b.backend_type, NULL::text, NULL::text,
       coalesce(n.waits, 0), b.on_cpu_ms + b.runq_wait_ms + coalesce(n.wait_time_ms, 0), NULL::float8,
       coalesce(n.stats_since, b.last_seen), b.last_seen
  FROM bpf_stats.backend_stats b
  LEFT JOIN bpf_stats.backend_wait_event_stats n
    ON (n.node, n.pid, n.backend_start, n.wait_event_type) = (b.node, b.pid, b.backend_start, '')
 WHERE b.on_cpu_ms IS NOT NULL;

-- Who ended each wait (opt-in probe set `blockers`): the sleeps of query_wait_events the set saw
-- woken, by the waker's backend type and the query it was on (NULL key: it was on none).
CREATE OR REPLACE VIEW bpf_stats.query_wait_blockers AS
SELECT b.node, b.userid, b.dbid, b.toplevel, b.queryid, b.wait_event_type, b.wait_event, b.waker_type,
       nullif(b.waker_userid, 0) AS waker_userid, nullif(b.waker_dbid, 0) AS waker_dbid,
       CASE WHEN b.waker_queryid <> 0 THEN b.waker_toplevel END AS waker_toplevel,
       nullif(b.waker_queryid, 0) AS waker_queryid,
       b.waits, b.wait_time_ms, b.stats_since, b.last_seen
  FROM bpf_stats.query_wait_blocker_stats b;
