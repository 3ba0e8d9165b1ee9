-- Lock views: what each query waited for. Re-applied when sql/ changed or a migration ran.
--
--   query_locks          one row per query: lock / LWLock wait time (default `cpu` set),
--                        spinlock_delays (`spinlock` set), and a readable summary of the
--                        detail rows (`locks` and `lwlock` sets), biggest first
--   query_lock_detail    heavyweight lock waits by lock type, mode and relation, per query
--   query_lwlock_detail  LWLock waits by tranche and mode, per query

SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_lock_detail AS
  SELECT w.node, w.userid, w.dbid, w.toplevel, w.queryid,
         CASE WHEN w.queryid = 0 THEN '<before the statement had a query id: parse analysis>' ELSE %s END AS query,
         w.locktype, w.mode,
         -- a relation of this database by name, of another by oid; NULL when the tag has none
         CASE WHEN w.relation = 0 THEN NULL
              WHEN w.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              THEN w.relation::regclass::text
              ELSE w.relation::text END AS relation,
         nullif(w.database, 0) AS database,
         w.waits, w.wait_time_ms,
         w.wait_time_ms / nullif(w.waits, 0) AS mean_wait_ms,
         w.stats_since, w.last_seen
    FROM bpf_stats.query_lock_waits w %s
$sql$);

SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_lwlock_detail AS
  SELECT w.node, w.userid, w.dbid, w.toplevel, w.queryid,
         CASE WHEN w.queryid = 0 THEN '<before the statement had a query id: parse analysis>' ELSE %s END AS query,
         w.tranche, w.mode, w.waits, w.wait_time_ms,
         w.wait_time_ms / nullif(w.waits, 0) AS mean_wait_ms,
         w.stats_since, w.last_seen
    FROM bpf_stats.query_lwlock_waits w %s
$sql$);

SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_locks AS
  SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, %s AS query, q.calls, q.total_time_ms,
         q.lock_wait_ms, q.lwlock_wait_ms, q.spinlock_delays,
         q.lock_wait_ms   / nullif(q.total_time_ms, 0) AS lock_wait_share,
         q.lwlock_wait_ms / nullif(q.total_time_ms, 0) AS lwlock_wait_share,
         l.lock_waits, l.lock_detail, lw.lwlock_waits, lw.lwlock_detail,
         q.stats_since, q.last_seen
    FROM bpf_stats.query_stats q
    LEFT JOIN LATERAL (
      SELECT sum(d.waits) AS lock_waits,
             string_agg(format('%%s %%s%%s: %%s waits, %%s ms', d.locktype, d.mode,
                               coalesce(' on ' || d.relation, ''), d.waits, round(d.wait_time_ms::numeric, 1)),
                        '; ' ORDER BY d.wait_time_ms DESC) AS lock_detail
        FROM bpf_stats.query_lock_detail d
       WHERE (d.node, d.userid, d.dbid, d.toplevel, d.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)) l ON true
    LEFT JOIN LATERAL (
      SELECT sum(d.waits) AS lwlock_waits,
             string_agg(format('%%s (%%s): %%s waits, %%s ms', d.tranche, d.mode, d.waits,
                               round(d.wait_time_ms::numeric, 3)),
                        '; ' ORDER BY d.wait_time_ms DESC) AS lwlock_detail
        FROM bpf_stats.query_lwlock_waits d
       WHERE (d.node, d.userid, d.dbid, d.toplevel, d.queryid) = (q.node, q.userid, q.dbid, q.toplevel, q.queryid)) lw ON true
    %s
   WHERE q.lock_wait_ms > 0 OR q.lwlock_wait_ms > 0 OR q.spinlock_delays > 0
      OR l.lock_waits IS NOT NULL OR lw.lwlock_waits IS NOT NULL
$sql$);
