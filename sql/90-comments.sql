-- What every table, view, function and column of bpf_stats means, with its unit, so that
-- `\d+ bpf_stats.query_time` (or any client that shows comments) documents the schema.
-- Re-applied with the views (when sql/ changed or a migration ran), before the grants (COMMENT ON
-- is idempotent). Tables belong to migrations/; their comments live here anyway, so that one
-- file holds the whole vocabulary and changes with the views.
--
-- Units: milliseconds as double precision (like pg_stat_statements), counts and bytes as
-- bigint. NULL means "not measured": the probe set that fills the column was off (or cannot
-- run on this host), never zero.
--
-- A metric column means the same thing in every relation that has it (query_stats,
-- backend_stats, their history tables, the views). Its comment is written once, with the
-- column's definition in its family (src/families/<family>/, `description`), and applied to
-- every such relation after this file (src/storage/metric-column-comments.ts). The other
-- columns shared by several relations are commented once, from the list below. Columns
-- particular to one relation are commented after it and override the list.
-- test/integration/sql-regression.test.ts fails when anything in bpf_stats has no comment.

DO $comments$
DECLARE
  c record;
BEGIN
  FOR c IN
    WITH shared(col, txt) AS (VALUES
      ('userid', 'Session user''s OID (pg_stat_activity.usesysid). Joins pg_stat_statements on (userid, dbid, toplevel, queryid); after SET ROLE pg_stat_statements keys by the current user, this by the session user.'),
      ('dbid', 'Database OID, as pg_stat_statements.dbid.'),
      ('toplevel', 'Always true: nested statements count toward their top-level statement. Kept so the key joins pg_stat_statements.'),
      ('queryid', 'Query id of the top-level statement (compute_query_id), as pg_stat_statements.queryid.'),
      ('node', 'The PostgreSQL server (node) the row is about: run --node, by default the collector''s host name and the server''s port. Several nodes (a primary and its standbys, or many servers writing into one database with run --sink) share bpf_stats; every key includes it.'),
      ('query', 'Query text as the node''s pg_stat_statements had it, copied by the collector into bpf_stats.query_texts (joined on node, userid, dbid, toplevel, queryid); NULL when pg_stat_statements is not installed in the node''s database or did not hold the entry yet.'),
      ('stats_since', 'When this row started accumulating (timestamptz).'),
      ('last_seen', 'Transaction time of the last flush that added to this row (timestamptz).')
    )
    SELECT format('COMMENT ON COLUMN %s.%I IS %L', a.attrelid::regclass, a.attname, s.txt) AS stmt
      FROM pg_class r
      JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      JOIN shared s ON s.col = a.attname
     WHERE r.relnamespace = 'bpf_stats'::regnamespace AND r.relkind IN ('r', 'p', 'v') AND NOT r.relispartition
  LOOP
    EXECUTE c.stmt;
  END LOOP;
END
$comments$;

-- Cumulative tables ------------------------------------------------------------------------

COMMENT ON TABLE bpf_stats.query_stats IS
  'Kernel figures per query, cumulative since stats_since, keyed like pg_stat_statements (userid, dbid, toplevel, queryid). Milliseconds are double precision, counts and bytes bigint. on_cpu_ms + runq_wait_ms + io_wait_ms + lock_wait_ms + lwlock_wait_ms + other_wait_ms = total_time_ms; reclaim_ms, compaction_stall_ms and writeback_throttle_ms are "of which" overlays. NULL: the column''s probe set never ran for this row; a set that ran part of the time covers only that part. A statement''s time from before it had a query id (parse analysis and the relation locks it waits for) counts under the id it then gets; queryid 0 holds that of statements that never got one (an error in parse analysis). Nested statements count in their top-level statement (toplevel = true).';

COMMENT ON TABLE bpf_stats.backend_stats IS
  'Kernel figures per postmaster child (backends, background processes and the postmaster), cumulative while the collector tracked it, keyed by (pid, backend_start) so a reused pid is a new row. Same metric columns as query_stats; everything the process did counts here, also work that belongs to no query. The collector''s own connections never appear.';
COMMENT ON COLUMN bpf_stats.backend_stats.pid IS 'Process id.';
COMMENT ON COLUMN bpf_stats.backend_stats.backend_start IS 'pg_stat_activity.backend_start for backends, the process start time for other postmaster children; with pid, the key.';
COMMENT ON COLUMN bpf_stats.backend_stats.backend_type IS 'Process type as pg_stat_activity.backend_type names it (client backend, checkpointer, walwriter, autovacuum worker, ..., postmaster).';
COMMENT ON COLUMN bpf_stats.backend_stats.datid IS 'Database OID the backend is connected to; NULL for processes without one.';
COMMENT ON COLUMN bpf_stats.backend_stats.usesysid IS 'Session user''s OID; NULL for processes without one.';
COMMENT ON COLUMN bpf_stats.backend_stats.queryid IS 'Query id of the current or last top-level statement; NULL when it never had one.';
COMMENT ON COLUMN bpf_stats.backend_stats.cgroup IS 'Path of the memory cgroup the process was in when first seen, as /proc/<pid>/cgroup shows it (cgroup v1''s memory hierarchy, or cgroup v2): a container''s processes are born in its cgroup. NULL when unknown (the cgroup was removed before the collector named it, or the hierarchy is not mounted where the collector runs).';
COMMENT ON COLUMN bpf_stats.backend_stats.exited_at IS 'When the process exited (timestamptz); NULL while it runs.';

-- History ----------------------------------------------------------------------------------

COMMENT ON TABLE bpf_stats.query_stats_history IS
  'What each flush added to query_stats: one row per query changed in that flush interval, stamped ts, written in the same statement as the cumulative rows (so the history sums to them). Metric columns as in query_stats, per interval; NULL: the column''s probe set was off during the interval. Range-partitioned by ts; bpf_stats.maintain_history drops partitions older than the retention (default 7 days).';
COMMENT ON COLUMN bpf_stats.query_stats_history.ts IS 'Transaction time of the flush that wrote this row (= query_stats.last_seen after it).';

COMMENT ON TABLE bpf_stats.backend_stats_history IS
  'What each flush added to backend_stats: one row per process changed in that flush interval, stamped ts, written in the same statement as the cumulative rows. Metric columns as in backend_stats, per interval; NULL: the column''s probe set was off during the interval. Range-partitioned by ts like query_stats_history.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.ts IS 'Transaction time of the flush that wrote this row (= backend_stats.last_seen after it).';
COMMENT ON COLUMN bpf_stats.backend_stats_history.pid IS 'Process id.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.backend_start IS 'As backend_stats.backend_start; with pid, the process.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.backend_type IS 'Process type as pg_stat_activity.backend_type names it.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.datid IS 'Database OID the backend is connected to; NULL for processes without one.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.usesysid IS 'Session user''s OID; NULL for processes without one.';
COMMENT ON COLUMN bpf_stats.backend_stats_history.queryid IS 'Query id of the current or last top-level statement at that flush; NULL when it never had one.';

COMMENT ON TABLE bpf_stats.query_histogram_history IS
  'What each history interval added to query_histograms: one row per (query, kind) whose histogram changed in the interval, with its non-zero buckets only, stamped ts, written with query_stats_history''s rows of the same flush. Sum counts per bucket over any period for its percentiles (pg-bpf-stats report does). Range-partitioned by ts like query_stats_history.';
COMMENT ON COLUMN bpf_stats.query_histogram_history.ts IS 'Transaction time of the flush that wrote this row.';
COMMENT ON COLUMN bpf_stats.query_histogram_history.kind IS 'As query_histograms.kind.';
COMMENT ON COLUMN bpf_stats.query_histogram_history.buckets IS 'The buckets that gained observations in the interval, ascending, numbered from 0: bucket b is query_histograms.counts[b + 1], from bpf_stats.hist_bucket_lower_us(b, 256) up to hist_bucket_lower_us(b + 1, 256) microseconds.';
COMMENT ON COLUMN bpf_stats.query_histogram_history.counts IS 'Observations the interval added to each bucket of buckets (same position), count.';
COMMENT ON COLUMN bpf_stats.query_histogram_history.observations IS 'Observations the interval added in all buckets (count).';
COMMENT ON COLUMN bpf_stats.query_histogram_history.max_so_far_ms IS 'The largest observation of the key''s histogram by the end of the interval (milliseconds; since the histogram entered the BPF map, so at least the largest of this interval, not necessarily from it).';

-- Histograms and lock waits ----------------------------------------------------------------

COMMENT ON TABLE bpf_stats.query_histograms IS
  'Log-linear histograms per query and kind (8 buckets per power of two), cumulative since stats_since. Read them through query_latency, query_runq_latency, bpf_stats.hist_quantile(counts, q, max_ms) or bpf_stats.hist_buckets(counts, max_ms).';
COMMENT ON COLUMN bpf_stats.query_histograms.kind IS 'What is observed: query_latency (statement latency, probe set `latency`), runq (each wait for a CPU, probe set `sched`), io (block IO request latency, probe set `io`).';
COMMENT ON COLUMN bpf_stats.query_histograms.counts IS 'Observations per bucket (bigint[], 256 buckets, 8 per power of two): counts[i] counts durations from bpf_stats.hist_bucket_lower_us(i - 1, 256) up to hist_bucket_lower_us(i, 256) microseconds (1 us wide below 16 us, at most 1/8 of the lower bound wide above); the last bucket also takes anything longer. bpf_stats.hist_buckets(counts, max_ms) lists them with their bounds.';
COMMENT ON COLUMN bpf_stats.query_histograms.observations IS 'Observations in all buckets (count).';
COMMENT ON COLUMN bpf_stats.query_histograms.max_ms IS 'The largest observation, exact (milliseconds), not a bucket bound.';

COMMENT ON TABLE bpf_stats.query_histograms_log2 IS
  'The histograms written before migration 1764600000000 (log2 buckets), kept unchanged and no longer written: query_histograms started again with log-linear buckets then. bpf_stats.hist_quantile and hist_buckets read these counts too.';
COMMENT ON COLUMN bpf_stats.query_histograms_log2.counts IS 'Observations per bucket (bigint[], 32 buckets): counts[i] counts durations in [2^(i-1), 2^i) microseconds, counts[1] from 0; the last bucket also takes anything longer.';
COMMENT ON COLUMN bpf_stats.query_histograms_log2.kind IS 'As query_histograms.kind.';
COMMENT ON COLUMN bpf_stats.query_histograms_log2.observations IS 'Observations in all buckets (count).';
COMMENT ON COLUMN bpf_stats.query_histograms_log2.max_ms IS 'The largest observation, exact (milliseconds), not a bucket bound.';

COMMENT ON TABLE bpf_stats.query_lock_waits IS
  'Heavyweight lock waits per query and what was waited for (probe set `locks`), cumulative since stats_since. A wait counts once it ended without an error; waits cut short by a timeout, cancel or deadlock are only in query_stats.lock_wait_ms. Read it through query_lock_detail.';
COMMENT ON COLUMN bpf_stats.query_lock_waits.queryid IS 'Query id of the top-level statement, as pg_stat_statements.queryid (a wait during parse analysis counts under the id the statement then gets); 0: waits of statements that never got a query id (an error in parse analysis).';
COMMENT ON COLUMN bpf_stats.query_lock_waits.locktype IS 'Lock type as pg_locks.locktype names it (relation, extend, page, tuple, transactionid, ...).';
COMMENT ON COLUMN bpf_stats.query_lock_waits.mode IS 'Requested lock mode as pg_locks.mode names it (AccessShareLock, ...).';
COMMENT ON COLUMN bpf_stats.query_lock_waits.database IS 'Database OID of the lock tag (relation, extend, page, tuple, frozenid, object, advisory and applytransaction locks); 0 when the tag has none.';
COMMENT ON COLUMN bpf_stats.query_lock_waits.relation IS 'Relation OID of the lock tag (relation, extend, page and tuple locks); 0 when the tag has none.';
COMMENT ON COLUMN bpf_stats.query_lock_waits.waits IS 'Waits that ended without an error (count).';
COMMENT ON COLUMN bpf_stats.query_lock_waits.wait_time_ms IS 'Milliseconds from each wait''s start to its end, summed; includes the run-queue wait after the wake-up, so a little more than the sleep lock_wait_ms counts.';

COMMENT ON TABLE bpf_stats.query_lwlock_waits IS
  'LWLock waits per query, tranche and mode (probe set `lwlock`), cumulative since stats_since. Read it through query_lwlock_detail.';
COMMENT ON COLUMN bpf_stats.query_lwlock_waits.queryid IS 'Query id of the top-level statement, as pg_stat_statements.queryid; 0: waits before the statement had a query id.';
COMMENT ON COLUMN bpf_stats.query_lwlock_waits.tranche IS 'LWLock tranche as pg_stat_activity.wait_event names it; ''tranche <id>'' for a built-in tranche of a stripped build without USDT (never a guessed name).';
COMMENT ON COLUMN bpf_stats.query_lwlock_waits.mode IS 'exclusive, shared or wait_until_free; unknown without USDT.';
COMMENT ON COLUMN bpf_stats.query_lwlock_waits.waits IS 'Waits (count).';
COMMENT ON COLUMN bpf_stats.query_lwlock_waits.wait_time_ms IS 'Milliseconds from each wait''s start to its end, summed.';

-- Query texts ------------------------------------------------------------------------------

COMMENT ON TABLE bpf_stats.query_texts IS
  'Query texts per node, copied by the collector from the node''s pg_stat_statements when a query first gets figures in a run, so the views show them wherever bpf_stats is written (a sink, run --sink) without the node''s pg_stat_statements.';
COMMENT ON COLUMN bpf_stats.query_texts.query IS 'Query text as pg_stat_statements.query showed it (normalized, constants as $n).';
COMMENT ON COLUMN bpf_stats.query_texts.first_seen IS 'When the text was first written (timestamptz).';
COMMENT ON COLUMN bpf_stats.query_texts.last_seen IS 'When the text was last written (timestamptz): once per collector run.';

-- Control plane, capabilities, health ------------------------------------------------------

COMMENT ON TABLE bpf_stats.collections IS
  'Collection requests made with bpf_stats.collect() and ended with bpf_stats.stop(): the control plane''s state. The sidecar checks each row again before acting on it. Finished requests are kept 30 days.';
COMMENT ON COLUMN bpf_stats.collections.id IS 'Request id, as collect() returns it.';
COMMENT ON COLUMN bpf_stats.collections.requested_by IS 'Session user that called collect().';
COMMENT ON COLUMN bpf_stats.collections.requested_at IS 'When the request was made (timestamptz).';
COMMENT ON COLUMN bpf_stats.collections.probes IS 'Probe sets asked for (''default'': the always-on sets).';
COMMENT ON COLUMN bpf_stats.collections.duration IS 'How long to collect (interval, more than 0 and at most 24 hours); NULL: until bpf_stats.stop(id), at most 24 hours.';
COMMENT ON COLUMN bpf_stats.collections.status IS 'pending, running, then done, failed, rejected (unknown or unsupported sets, see error) or stopped.';
COMMENT ON COLUMN bpf_stats.collections.started_at IS 'When its probe sets were attached (timestamptz); NULL before.';
COMMENT ON COLUMN bpf_stats.collections.finished_at IS 'When it ended (timestamptz); NULL while pending or running.';
COMMENT ON COLUMN bpf_stats.collections.error IS 'Why it was rejected or failed; NULL otherwise.';
COMMENT ON COLUMN bpf_stats.collections.node IS 'The node whose collector is asked (collect(..., node)); NULL: whichever collector took it first, which then writes its node here.';

COMMENT ON TABLE bpf_stats.capabilities IS
  'What this host and this Postgres support, as `pg-bpf-stats check` prints it: one row per requirement, feature and probe set, replaced by each collector start on that host.';
COMMENT ON COLUMN bpf_stats.capabilities.host IS 'Host name of the collector that checked.';
COMMENT ON COLUMN bpf_stats.capabilities.kind IS 'requirement (privileges, btf, kernel, bpf load, postmaster), feature (usdt, query ids, llc) or probe set.';
COMMENT ON COLUMN bpf_stats.capabilities.probe IS 'What was checked: the requirement, feature or probe set name.';
COMMENT ON COLUMN bpf_stats.capabilities.available IS 'Whether it works here (never a fake true: llc without a hardware PMU is false).';
COMMENT ON COLUMN bpf_stats.capabilities.required IS 'Whether the collector needs it to run.';
COMMENT ON COLUMN bpf_stats.capabilities.reason IS 'The check''s detail: what was found, or why not.';
COMMENT ON COLUMN bpf_stats.capabilities.checked_at IS 'When it was checked (timestamptz).';

COMMENT ON TABLE bpf_stats.health IS
  'One row per collector process (host, pid), written by every flush in the same statement as its data, so it says what the committed data contains.';
COMMENT ON COLUMN bpf_stats.health.host IS 'Host name of the collector.';
COMMENT ON COLUMN bpf_stats.health.pid IS 'Process id of the collector.';
COMMENT ON COLUMN bpf_stats.health.version IS 'pg-bpf-stats version.';
COMMENT ON COLUMN bpf_stats.health.postmaster_pid IS 'Process id of the postmaster it collects from.';
COMMENT ON COLUMN bpf_stats.health.probe_sets IS 'Probe sets attached at the last flush.';
COMMENT ON COLUMN bpf_stats.health.started_at IS 'When the collector started (timestamptz).';
COMMENT ON COLUMN bpf_stats.health.interval_ms IS 'Flush interval (milliseconds), to judge whether last_flush_at is stale.';
COMMENT ON COLUMN bpf_stats.health.last_flush_at IS 'Transaction time of the last successful flush (= the rows'' last_seen); NULL before the first.';
COMMENT ON COLUMN bpf_stats.health.flush_ms IS 'Milliseconds the last successful flush took, up to its health statement; NULL before the first.';
COMMENT ON COLUMN bpf_stats.health.flushes IS 'Successful flushes (count).';
COMMENT ON COLUMN bpf_stats.health.rows_written IS 'Query and backend rows written by all successful flushes (count).';
COMMENT ON COLUMN bpf_stats.health.last_rows IS 'Query and backend rows written by the last successful flush (count).';
COMMENT ON COLUMN bpf_stats.health.dropped_events IS 'Events the BPF programs could not record since the collector loaded them (count, the sum of the counters in dropped).';
COMMENT ON COLUMN bpf_stats.health.dropped IS 'Each BPF overflow/failure counter by name (jsonb, counts since load).';
COMMENT ON COLUMN bpf_stats.health.map_fill_pct IS 'Fill of the fullest bounded BPF map (percent, 0..100).';
COMMENT ON COLUMN bpf_stats.health.map_fill IS 'Fill per map (jsonb: entries and max_entries).';
COMMENT ON COLUMN bpf_stats.health.pending_rows IS 'Changed rows not written yet (count): those a failed flush could not write, or those a flush left for the next because a flush after a failed one writes at most half as many rows per table as the one before (from 16,384 down to 128, doubling back after each written flush), so that a flush small enough to commit comes whatever kills long statements. They stay in the maps and go out with a later flush.';
COMMENT ON COLUMN bpf_stats.health.failed_flushes IS 'Failed flushes (count).';
COMMENT ON COLUMN bpf_stats.health.last_error IS 'Error of the last failed flush; NULL if none failed.';
COMMENT ON COLUMN bpf_stats.health.last_error_at IS 'When the last flush failed (timestamptz); NULL if none failed.';
COMMENT ON COLUMN bpf_stats.health.history_retention IS 'How long the history tables keep rows (interval); NULL: history off.';
COMMENT ON COLUMN bpf_stats.health.updated_at IS 'When this row was last written (timestamptz).';
COMMENT ON COLUMN bpf_stats.health.stopped_at IS 'When the collector stopped (timestamptz): at its clean stop or its last failure, or, for one that died without a word, its last update as seen by the next collector on this host; NULL while it runs.';
COMMENT ON COLUMN bpf_stats.health.stop_reason IS 'Why it stopped: stopped (SIGTERM) and the like for a clean stop, failed: and the error that ended it, or crashed (it died without a final flush: killed or crashed, found by the next collector on this host); NULL while it runs. Rows of stopped collectors leave after the row retention.';

COMMENT ON TABLE bpf_stats.migrations IS 'Migrations applied to bpf_stats (node-pg-migrate''s bookkeeping).';
COMMENT ON COLUMN bpf_stats.migrations.id IS 'Row id.';
COMMENT ON COLUMN bpf_stats.migrations.name IS 'Migration file name, without .sql.';
COMMENT ON COLUMN bpf_stats.migrations.run_on IS 'When it was applied (timestamp without time zone).';

-- Views ------------------------------------------------------------------------------------

COMMENT ON VIEW bpf_stats.activity IS
  'Live backends (pg_stat_activity) with what the kernel saw each do, from backend_stats joined on pid and backend_start. Metric columns are cumulative for the backend and NULL until its first flush (and for the collector''s own connections).';
COMMENT ON COLUMN bpf_stats.activity.pid IS 'pg_stat_activity.pid.';
COMMENT ON COLUMN bpf_stats.activity.backend_type IS 'pg_stat_activity.backend_type.';
COMMENT ON COLUMN bpf_stats.activity.datname IS 'pg_stat_activity.datname.';
COMMENT ON COLUMN bpf_stats.activity.usename IS 'pg_stat_activity.usename.';
COMMENT ON COLUMN bpf_stats.activity.state IS 'pg_stat_activity.state.';
COMMENT ON COLUMN bpf_stats.activity.wait_event_type IS 'pg_stat_activity.wait_event_type.';
COMMENT ON COLUMN bpf_stats.activity.wait_event IS 'pg_stat_activity.wait_event.';
COMMENT ON COLUMN bpf_stats.activity.query_id IS 'pg_stat_activity.query_id.';
COMMENT ON COLUMN bpf_stats.activity.query IS 'pg_stat_activity.query.';
COMMENT ON COLUMN bpf_stats.activity.backend_start IS 'pg_stat_activity.backend_start.';
COMMENT ON COLUMN bpf_stats.activity.node IS 'The node of backend_stats'' row: a node whose collector measures this server (bpf_stats.local_nodes()); NULL without a row.';
COMMENT ON COLUMN bpf_stats.activity.last_seen IS 'Transaction time of the last flush that added to the backend''s row; NULL before its first.';

COMMENT ON VIEW bpf_stats.query_time IS
  'Where each query''s time went: the partition of total_time_ms and each part''s share of it (the six partition shares sum to 1); reclaim_ms and reclaim_share are an overlay ("of which").';
COMMENT ON COLUMN bpf_stats.query_time.on_cpu_share IS 'on_cpu_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.runq_wait_share IS 'runq_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.io_wait_share IS 'io_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.lock_wait_share IS 'lock_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.lwlock_wait_share IS 'lwlock_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.other_wait_share IS 'other_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_time.reclaim_share IS 'reclaim_ms / total_time_ms (fraction 0..1): an overlay, already inside the other shares, not part of their sum; NULL when not measured or total_time_ms is 0.';

COMMENT ON VIEW bpf_stats.cgroup_memory IS
  'Memory pressure per memory cgroup (a container''s, where its memory limit is set): the figures of backend_stats summed over the processes that were born in it, live and exited (until row retention removes them). Each metric column is the sum of that column over those processes.';
COMMENT ON COLUMN bpf_stats.cgroup_memory.cgroup IS 'Path of the memory cgroup, as backend_stats.cgroup and /proc/<pid>/cgroup show it.';
COMMENT ON COLUMN bpf_stats.cgroup_memory.processes IS 'Processes of this cgroup with a backend_stats row, live and exited (count).';
COMMENT ON COLUMN bpf_stats.cgroup_memory.live_processes IS 'Of which still running (count).';
COMMENT ON COLUMN bpf_stats.cgroup_memory.last_seen IS 'Latest last_seen of its processes (timestamptz).';

COMMENT ON VIEW bpf_stats.query_memory IS
  'Memory stalls per query: reclaim and compaction (probe set `memory`, overlays: "of which") and page faults (probe set `cpu`).';
COMMENT ON COLUMN bpf_stats.query_memory.reclaim_fraction IS 'reclaim_ms / total_time_ms (fraction 0..1, of which); NULL when not measured or total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_memory.reclaim_ms_per_call IS 'reclaim_ms / calls (milliseconds); NULL without calls (the `query` set).';
COMMENT ON COLUMN bpf_stats.query_memory.compaction_stall_ms_per_call IS 'compaction_stall_ms / calls (milliseconds); NULL without calls (the `query` set).';
COMMENT ON COLUMN bpf_stats.query_memory.majflt_per_call IS 'majflt / calls (major faults per statement); NULL without calls (the `query` set).';

COMMENT ON VIEW bpf_stats.query_io IS
  'Block IO per query: the requests its backends created (probe set `io`), the time asleep in IO (probe set `cpu`) and writeback throttling (of which).';
COMMENT ON COLUMN bpf_stats.query_io.avg_read_bytes IS 'blk_read_bytes / blk_read_ios: mean bytes per read request; NULL without requests.';
COMMENT ON COLUMN bpf_stats.query_io.avg_write_bytes IS 'blk_write_bytes / blk_write_ios: mean bytes per write request; NULL without requests.';
COMMENT ON COLUMN bpf_stats.query_io.io_wait_fraction IS 'io_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_io.read_bytes_per_call IS 'blk_read_bytes / calls (bytes per statement); NULL without calls (the `query` set).';
COMMENT ON COLUMN bpf_stats.query_io.write_bytes_per_call IS 'blk_write_bytes / calls (bytes per statement); NULL without calls (the `query` set).';

COMMENT ON VIEW bpf_stats.query_locks IS
  'Queries that waited for locks: heavyweight and LWLock wait time (probe set `cpu`), spin delays (`spinlock`), and a readable summary of the detail rows (`locks`, `lwlock`), biggest first.';
COMMENT ON COLUMN bpf_stats.query_locks.lock_wait_share IS 'lock_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_locks.lwlock_wait_share IS 'lwlock_wait_ms / total_time_ms (fraction 0..1); NULL when total_time_ms is 0.';
COMMENT ON COLUMN bpf_stats.query_locks.lock_waits IS 'Heavyweight lock waits in query_lock_detail (count); NULL without detail rows (probe set `locks`).';
COMMENT ON COLUMN bpf_stats.query_locks.lock_detail IS 'query_lock_detail''s rows as text, ''<locktype> <mode>[ on <relation>]: <waits> waits, <wait_time_ms> ms'', longest first, separated by ''; ''.';
COMMENT ON COLUMN bpf_stats.query_locks.lwlock_waits IS 'LWLock waits in query_lwlock_waits (count); NULL without detail rows (probe set `lwlock`).';
COMMENT ON COLUMN bpf_stats.query_locks.lwlock_detail IS 'query_lwlock_waits'' rows as text, ''<tranche> (<mode>): <waits> waits, <wait_time_ms> ms'', longest first, separated by ''; ''.';

COMMENT ON VIEW bpf_stats.query_lock_detail IS
  'Heavyweight lock waits per query by lock type, mode and relation (probe set `locks`); see query_lock_waits.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.queryid IS 'Query id of the top-level statement (a wait during parse analysis counts under the id the statement then gets); 0: waits of statements that never got one (an error in parse analysis).';
COMMENT ON COLUMN bpf_stats.query_lock_detail.query IS 'Query text from bpf_stats.query_texts (the node''s pg_stat_statements; NULL when not found there); for queryid 0 a label saying the wait came before the statement had a query id.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.locktype IS 'Lock type as pg_locks.locktype names it.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.mode IS 'Requested lock mode as pg_locks.mode names it.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.relation IS 'The locked relation: its name when it is in this database, its OID as text when in another; NULL when the lock tag has none.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.database IS 'Database OID of the lock tag; NULL when the tag has none.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.waits IS 'Waits that ended without an error (count).';
COMMENT ON COLUMN bpf_stats.query_lock_detail.wait_time_ms IS 'Milliseconds from each wait''s start to its end, summed.';
COMMENT ON COLUMN bpf_stats.query_lock_detail.mean_wait_ms IS 'wait_time_ms / waits (milliseconds).';

COMMENT ON TABLE bpf_stats.query_wait_event_stats IS
  'Off-CPU time per query and PostgreSQL wait event (probe set `cpu`, always on), cumulative since stats_since: every sleep counted in the query''s io_wait_ms, lock_wait_ms, lwlock_wait_ms and other_wait_ms, charged to the wait event the backend had set when it went to sleep, so per query they sum to those four columns. Read it through query_wait_events.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.queryid IS 'Query id of the top-level statement, as pg_stat_statements.queryid; 0: waits before the statement had a query id (parse analysis and the relation locks it waits for), which query_stats counts under the id the statement then gets.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.wait_event_type IS 'pg_stat_activity.wait_event_type as this server''s version names it; '''' for a sleep without a wait event (a page fault''s read, reclaim); ''#<n>'' for a class the version''s table does not know.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.wait_event IS 'pg_stat_activity.wait_event as this server''s version names it; ''#<id>'' for an id its table does not know (an extension''s custom event, an unregistered LWLock tranche), never a guessed name; '''' for a sleep without one.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.waits IS 'Sleeps in this wait event (count): each time the backend left its CPU to sleep with it set.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.wait_time_ms IS 'Milliseconds asleep in this wait event, summed: from leaving the CPU to being woken (the run-queue wait after the wake-up is in runq_wait_ms).';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats.runq_after_ms IS 'Milliseconds from each wake-up until the backend ran again (in the run queue, the event still set), summed; counted in runq_wait_ms, not in wait_time_ms. wait_time_ms + runq_after_ms is the time pg_stat_activity showed the event, what a sampler such as pg_wait_sampling sees.';

COMMENT ON TABLE bpf_stats.backend_wait_event_stats IS
  'Off-CPU time per postmaster child (its backend_stats row) and wait event (probe set `cpu`), cumulative since stats_since: every sleep, the idle time waiting for the client (Client:ClientRead) included. Read it through backend_wait_events.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.pid IS 'Process id; with backend_start, its backend_stats row.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.backend_start IS 'As backend_stats.backend_start.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.wait_event_type IS 'As query_wait_event_stats.wait_event_type.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.wait_event IS 'As query_wait_event_stats.wait_event; an idle backend (pg_stat_activity.state idle or idle in transaction) counts as Client:ClientRead.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.waits IS 'Sleeps in this wait event (count).';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.wait_time_ms IS 'Milliseconds asleep in this wait event, summed.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats.runq_after_ms IS 'As query_wait_event_stats.runq_after_ms; 0 for ClientRead and the row without a wait event (kept in the process record, without it).';

COMMENT ON TABLE bpf_stats.query_wait_event_stats_history IS
  'What each history interval added to query_wait_event_stats: one row per query and wait event changed in that interval (run --history-interval, default 5 min), stamped ts, written in the same statement as the cumulative rows, so a key''s rows sum to its query_wait_event_stats row. Range-partitioned by ts like query_stats_history, with the same retention; a query key''s rows go with its query_stats row.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.ts IS 'Transaction time of the flush that wrote this row (= query_wait_event_stats.last_seen after it).';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.wait_event_type IS 'As query_wait_event_stats.wait_event_type.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.wait_event IS 'As query_wait_event_stats.wait_event.';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.waits IS 'Sleeps in this wait event during the interval (count).';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.wait_time_ms IS 'Milliseconds asleep in this wait event during the interval (as query_wait_event_stats.wait_time_ms).';
COMMENT ON COLUMN bpf_stats.query_wait_event_stats_history.runq_after_ms IS 'Run-queue wait after the interval''s wake-ups in this event, milliseconds (as query_wait_event_stats.runq_after_ms).';

COMMENT ON TABLE bpf_stats.backend_wait_event_stats_history IS
  'What each history interval added to backend_wait_event_stats: one row per process and wait event changed in that interval, stamped ts, written in the same statement as the cumulative rows. Range-partitioned by ts like backend_stats_history, with the same retention.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.ts IS 'Transaction time of the flush that wrote this row (= backend_wait_event_stats.last_seen after it).';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.pid IS 'Process id; with backend_start, its backend_stats row.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.backend_start IS 'As backend_stats.backend_start.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.wait_event_type IS 'As backend_wait_event_stats.wait_event_type.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.wait_event IS 'As backend_wait_event_stats.wait_event.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.waits IS 'Sleeps in this wait event during the interval (count).';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.wait_time_ms IS 'Milliseconds asleep in this wait event during the interval.';
COMMENT ON COLUMN bpf_stats.backend_wait_event_stats_history.runq_after_ms IS 'As backend_wait_event_stats.runq_after_ms, during the interval.';

COMMENT ON VIEW bpf_stats.query_wait_events IS
  'Time per query and wait event, shaped like pg_wait_sampling''s profile but exact: one row per wait event the query slept in, and one row with wait_event_type and wait_event NULL for the time without a wait event (on CPU, in the run queue, asleep without one). Per query the rows sum to query_stats.total_time_ms (waits before the statement had its query id are under queryid 0). Idle time between statements is in no row (see backend_wait_events).';
COMMENT ON COLUMN bpf_stats.query_wait_events.wait_event_type IS 'pg_stat_activity.wait_event_type as this server''s version names it; NULL: the time without a wait event.';
COMMENT ON COLUMN bpf_stats.query_wait_events.wait_event IS 'pg_stat_activity.wait_event as this server''s version names it; ''#<id>'' for an id the version''s table does not know; NULL: the time without a wait event.';
COMMENT ON COLUMN bpf_stats.query_wait_events.waits IS 'Sleeps in this wait event (count); for the NULL row, sleeps without a wait event.';
COMMENT ON COLUMN bpf_stats.query_wait_events.wait_time_ms IS 'Milliseconds asleep in this wait event; for the NULL row on_cpu_ms + runq_wait_ms + the sleeps without a wait event.';
COMMENT ON COLUMN bpf_stats.query_wait_events.runq_after_ms IS 'Milliseconds in the run queue after each wake-up, the event still set (in runq_wait_ms); NULL for the row without a wait event.';

COMMENT ON VIEW bpf_stats.backend_wait_events IS
  'Time per postmaster child and wait event, idle time waiting for the client (Client:ClientRead) included, and a row with wait_event_type and wait_event NULL for its time on CPU, in the run queue and asleep without a wait event.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.pid IS 'Process id.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.backend_start IS 'As backend_stats.backend_start; with pid, the process.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.backend_type IS 'Process type as pg_stat_activity.backend_type names it; NULL until its backend_stats row is written.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.wait_event_type IS 'As query_wait_events.wait_event_type.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.wait_event IS 'As query_wait_events.wait_event; an idle backend counts as Client:ClientRead.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.waits IS 'Sleeps in this wait event (count); for the NULL row, sleeps without a wait event.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.wait_time_ms IS 'Milliseconds asleep in this wait event; for the NULL row on_cpu_ms + runq_wait_ms + the sleeps without a wait event.';
COMMENT ON COLUMN bpf_stats.backend_wait_events.runq_after_ms IS 'As query_wait_events.runq_after_ms.';

COMMENT ON TABLE bpf_stats.query_wait_blocker_stats IS
  'Who ended each wait (opt-in probe set `blockers`), cumulative since stats_since: the sleeps of query_wait_event_stats that the set saw woken, per waker. Read it through query_wait_blockers.';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.queryid IS 'As query_wait_event_stats.queryid: the waiter''s statement.';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.wait_event_type IS 'As query_wait_event_stats.wait_event_type: what the waiter waited for.';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.wait_event IS 'As query_wait_event_stats.wait_event.';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waker_type IS 'The process that woke the waiter: a child of the postmaster by pg_stat_activity.backend_type (''postmaster child'' before its type was read), ''postmaster'', ''interrupt'' (a timer, a device: no process), ''kernel thread'', or ''other process'' (outside the postmaster).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waker_userid IS 'The user of the statement the waker was on when it woke the waiter (0: none).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waker_dbid IS 'The database of that statement (0: none).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waker_toplevel IS 'Whether that statement was top level (st_query_id only holds top-level ids).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waker_queryid IS 'The query id of that statement, as pg_stat_statements.queryid (0: none, or a process without statements).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.waits IS 'Sleeps this waker ended (count).';
COMMENT ON COLUMN bpf_stats.query_wait_blocker_stats.wait_time_ms IS 'Milliseconds asleep in those sleeps, summed, as query_wait_event_stats.wait_time_ms counts them (leaving the CPU to the wake-up).';

COMMENT ON VIEW bpf_stats.query_wait_blockers IS
  'Who ended each wait (opt-in probe set `blockers`): per query and wait event, the process that woke the waiter, by its backend type and the statement it was on: the lock holder at its commit, the walsender releasing a synchronous commit, the backend or io worker that finished an IO, or an interrupt (a timer ending a sleep). Counts the sleeps woken while the set was attached: per query and wait event at most query_wait_events'' waits and wait_time_ms.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.wait_event_type IS 'As query_wait_events.wait_event_type: what the waiter waited for.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.wait_event IS 'As query_wait_events.wait_event.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waker_type IS 'As query_wait_blocker_stats.waker_type.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waker_userid IS 'The user of the statement the waker was on; NULL: it was on none.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waker_dbid IS 'The database of that statement; NULL: none.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waker_toplevel IS 'Whether that statement was top level; NULL: none.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waker_queryid IS 'Its query id (join pg_stat_statements on waker_userid, waker_dbid, waker_toplevel, waker_queryid); NULL: none.';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.waits IS 'Sleeps this waker ended (count).';
COMMENT ON COLUMN bpf_stats.query_wait_blockers.wait_time_ms IS 'Milliseconds asleep in them, summed (leaving the CPU to the wake-up).';

COMMENT ON VIEW bpf_stats.query_lwlock_detail IS
  'LWLock waits per query by tranche and mode (probe set `lwlock`); see query_lwlock_waits.';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.queryid IS 'Query id of the top-level statement; 0: waits before it had a query id.';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.query IS 'Query text from bpf_stats.query_texts (the node''s pg_stat_statements; NULL when not found there); for queryid 0 a label saying the wait came before the statement had a query id.';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.tranche IS 'LWLock tranche as pg_stat_activity.wait_event names it (''tranche <id>'' when the name is unknown).';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.mode IS 'exclusive, shared or wait_until_free; unknown without USDT.';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.waits IS 'Waits (count).';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.wait_time_ms IS 'Milliseconds from each wait''s start to its end, summed.';
COMMENT ON COLUMN bpf_stats.query_lwlock_detail.mean_wait_ms IS 'wait_time_ms / waits (milliseconds).';

COMMENT ON VIEW bpf_stats.query_latency IS
  'Statement latency per query (probe set `latency`): each observation is one statement''s state_change - query_start, as pg_stat_activity shows it. Quantiles interpolate inside a log-linear bucket (off by less than 1/8 of the value, or 1 us below 16 us); max_ms is exact.';
COMMENT ON COLUMN bpf_stats.query_latency.calls IS 'query_stats.calls: statements counted exactly by the `query` set; NULL: not measured.';
COMMENT ON COLUMN bpf_stats.query_latency.observations IS 'Statements measured (count).';
COMMENT ON COLUMN bpf_stats.query_latency.p50_ms IS 'Median latency (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_latency.p95_ms IS '95th percentile latency (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_latency.p99_ms IS '99th percentile latency (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_latency.max_ms IS 'Largest latency seen (milliseconds), exact.';
COMMENT ON COLUMN bpf_stats.query_latency.counts IS 'The histogram, as query_histograms.counts (bounds: bpf_stats.hist_buckets(counts, max_ms)).';

COMMENT ON VIEW bpf_stats.query_runq_latency IS
  'Run-queue latency per query (probe set `sched`): each wait for a CPU of a backend while on this query. Quantiles interpolate inside a log-linear bucket (off by less than 1/8 of the value, or 1 us below 16 us); max_ms is exact.';
COMMENT ON COLUMN bpf_stats.query_runq_latency.waits IS 'Waits for a CPU measured (count).';
COMMENT ON COLUMN bpf_stats.query_runq_latency.p50_ms IS 'Median wait for a CPU (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_runq_latency.p95_ms IS '95th percentile wait for a CPU (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_runq_latency.p99_ms IS '99th percentile wait for a CPU (milliseconds), from the histogram.';
COMMENT ON COLUMN bpf_stats.query_runq_latency.max_ms IS 'Longest wait for a CPU seen (milliseconds), exact.';
COMMENT ON COLUMN bpf_stats.query_runq_latency.counts IS 'The histogram, as query_histograms.counts (bounds: bpf_stats.hist_buckets(counts, max_ms)).';

COMMENT ON VIEW bpf_stats.query_llc IS
  'Last-level cache references and misses per query (probe set `llc`, sampled hardware events; NULL where it never ran, e.g. without a hardware PMU).';
COMMENT ON COLUMN bpf_stats.query_llc.llc_miss_ratio IS 'llc_misses / llc_references (fraction 0..1); NULL when not measured or without references.';

-- Functions --------------------------------------------------------------------------------

COMMENT ON FUNCTION bpf_stats.hist_quantile(bigint[], double precision, double precision) IS
  'hist_quantile(counts bigint[], q double precision, max_ms double precision) -> double precision: the q-quantile (q from 0 to 1) in milliseconds of a histogram of query_histograms (256 log-linear buckets) or query_histograms_log2 (32 log2 buckets), told apart by the length; interpolated linearly inside its bucket and never above max_ms, the exact largest observation. Off by less than the bucket''s width: 1/8 of the value (1 us below 16 us) for log-linear buckets, a factor of 2 for log2 ones. NULL for an empty histogram, q outside 0..1 or an array of another length.';
COMMENT ON FUNCTION bpf_stats.hist_bucket_lower_us(integer, integer) IS
  'hist_bucket_lower_us(slot integer, slots integer) -> double precision: where bucket `slot` (0-based) of a histogram of `slots` buckets begins, in microseconds. 256 (log-linear): slots 0..15 at slot us, then slot 8g + m at (8 + m) * 2^(g-1) us; 32 (log2, query_histograms_log2): 2^slot us, slot 0 at 0. Infinity for slot = slots; NULL for another length.';
COMMENT ON FUNCTION bpf_stats.hist_buckets(bigint[], double precision) IS
  'hist_buckets(counts bigint[], max_ms double precision) -> (bucket, lower_ms, upper_ms, count): the buckets of a histogram (either layout) that hold observations, with their bounds in milliseconds; the last bucket ends at max_ms.';
COMMENT ON FUNCTION bpf_stats.create_view_with_query_text(text) IS
  'Internal: creates or replaces a view whose definition has two %s placeholders, the query text expression and the join that provides it (pg_stat_statements when installed, else NULL::text and no join).';
COMMENT ON FUNCTION bpf_stats.drop_history_partition(text) IS
  'Internal: drops one history partition unless a reader holds it off for more than 100 ms; returns whether it did (bpf_stats.maintain_history retries it at its next pass).';
COMMENT ON FUNCTION bpf_stats.maintain_history(interval, interval) IS
  'Internal, called by the collector: drops history partitions whose rows are all older than retention and creates partitions width wide up to two widths ahead; retention NULL drops nothing and only fills the gaps (a sink node''s pass). Returns how many it created and dropped.';
COMMENT ON FUNCTION bpf_stats.local_nodes() IS
  'Internal: the nodes whose collector measures this very server (it holds a session here, as the schema''s owner, a superuser or a role with the owner''s privileges); the activity view shows their rows only. On a standby, whose bpf_stats is its primary''s, the standby''s own node.';
COMMENT ON FUNCTION bpf_stats.require_admin() IS
  'Internal: raises insufficient_privilege unless the session user is a member of bpf_stats_admin.';
COMMENT ON FUNCTION bpf_stats.collect(text[], interval, text) IS
  'collect(probes text[] DEFAULT ''{default}'', duration interval DEFAULT NULL, node text DEFAULT NULL) -> bigint: asks the collector of node to attach probe sets for duration (more than 0, at most 24 hours; NULL: until stop(id), at most 24 hours). node NULL: the one collector writing here (an error when collectors of several nodes do). Call it where the collector writes (its sink with run --sink). Returns the request id to watch in bpf_stats.collections. bpf_stats_admin members only.';
COMMENT ON FUNCTION bpf_stats.stop(bigint) IS
  'stop(id bigint) -> boolean: ends a collection request (a pending one never starts, a running one is detached). false when it had already ended. bpf_stats_admin members only.';

COMMENT ON SCHEMA bpf_stats IS
  'pg-bpf-stats: per-query and per-backend kernel metrics collected with BPF. Milliseconds are double precision, counts and bytes bigint; NULL means not measured.';

COMMENT ON TYPE bpf_stats.query_increments IS
  'The collector''s own: one query key''s increments as a flush sends them (one array of these rows per flush, for query_stats and its history). Not for queries.';
