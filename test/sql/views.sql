--
-- The bpf_stats views and hist_quantile over rows with known values.
-- Keys: userid 10 (the bootstrap superuser) and dbid 1 (template1), fixed in every cluster.
-- Timestamps are fixed; the session runs with TimeZone UTC. Hand-computed values are in the
-- comments before each SELECT; the expected output must agree with them.
--
-- Query 1001: every probe set measured. The partition
--   on_cpu 80 + runq 20 + io 50 + lock 30 + lwlock 10 + other 10 = 200 = total_time_ms;
-- reclaim 16 and compaction 2 and writeback 5 are overlays inside it ("of which").
-- Query 1002: only the always-on cpu set: calls and the optional families are NULL.
--   0.25 + 0.125 + 0.125 = 0.5 = total_time_ms.
-- Query 1003: measured but all zero: every ratio divides by zero and must be NULL.
-- Rows name their node from the session, as the collector's connections do (run --node).
SET bpf_stats.node = 'node-a';
INSERT INTO bpf_stats.query_stats
  (userid, dbid, toplevel, queryid, calls, total_time_ms, on_cpu_ms, runq_wait_ms, io_wait_ms,
   lock_wait_ms, lwlock_wait_ms, reclaim_ms, other_wait_ms, minflt, majflt, blk_read_ios,
   blk_read_bytes, blk_write_ios, blk_write_bytes, llc_references, llc_misses, cpu_migrations,
   nvcsw, nivcsw, reclaim_pages, compaction_stall_ms, writeback_throttle_ms, spinlock_delays,
   stats_since, last_seen)
VALUES
  (10, 1, true, 1001, 4, 200, 80, 20, 50, 30, 10, 16, 10, 1000, 8, 64, 524288, 16, 131072,
   100000, 25000, 3, 40, 7, 256, 2, 5, 12, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1002, NULL, 0.5, 0.25, 0.125, 0, 0, 0, NULL, 0.125, 2, 0, NULL, NULL, NULL, NULL,
   NULL, NULL, 0, 1, 1, NULL, NULL, NULL, NULL, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1003, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
   '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00');
-- query_time. 1001: shares 80/200 = 0.4, 20/200 = 0.1, 50/200 = 0.25, 30/200 = 0.15,
-- 10/200 = 0.05, 10/200 = 0.05 (sum 1); reclaim_share 16/200 = 0.08 is outside that sum.
-- 1002: 0.25/0.5 = 0.5, 0.125/0.5 = 0.25, 0, 0, 0, 0.25; reclaim_share NULL (not measured).
-- 1003: total 0, so every share is NULL.
SELECT queryid, query, calls, total_time_ms, on_cpu_share, runq_wait_share, io_wait_share,
       lock_wait_share, lwlock_wait_share, other_wait_share, reclaim_share,
       on_cpu_share + runq_wait_share + io_wait_share + lock_wait_share + lwlock_wait_share
         + other_wait_share AS partition_sum
  FROM bpf_stats.query_time ORDER BY queryid;
SELECT queryid, on_cpu_ms, runq_wait_ms, io_wait_ms, lock_wait_ms, lwlock_wait_ms, other_wait_ms,
       reclaim_ms, stats_since, last_seen
  FROM bpf_stats.query_time ORDER BY queryid;
-- query_memory. 1001: reclaim_fraction 16/200 = 0.08; per call (4 calls): reclaim 16/4 = 4 ms,
-- compaction 2/4 = 0.5 ms, major faults 8/4 = 2. 1002: no calls and no memory set: NULL.
-- 1003: calls 0 and total 0: NULL.
SELECT queryid, calls, reclaim_ms, reclaim_pages, compaction_stall_ms, minflt, majflt,
       reclaim_fraction, reclaim_ms_per_call, compaction_stall_ms_per_call, majflt_per_call,
       total_time_ms
  FROM bpf_stats.query_memory ORDER BY queryid;
-- query_io. 1001: 524288 B / 64 reads = 8192 B per read, 131072 B / 16 writes = 8192 B per
-- write; io_wait_fraction 50/200 = 0.25; per call 524288/4 = 131072 and 131072/4 = 32768 B.
SELECT queryid, calls, blk_read_ios, blk_read_bytes, blk_write_ios, blk_write_bytes, io_wait_ms,
       writeback_throttle_ms, avg_read_bytes, avg_write_bytes, io_wait_fraction,
       read_bytes_per_call, write_bytes_per_call
  FROM bpf_stats.query_io ORDER BY queryid;
-- query_llc. 1001: 25000 misses / 100000 references = 0.25. 1002: not measured, NULL.
-- 1003: no references, NULL (not a division by zero).
SELECT queryid, calls, llc_references, llc_misses, llc_miss_ratio
  FROM bpf_stats.query_llc ORDER BY queryid;
--
-- Lock waits. A table of this database shows by name, a relation of another database (1) by
-- OID, a lock tag without a relation as NULL; queryid 0 is labelled as parse analysis.
CREATE TABLE regress_accounts (id int);
INSERT INTO bpf_stats.query_lock_waits
  (userid, dbid, toplevel, queryid, locktype, mode, database, relation, waits, wait_time_ms, stats_since, last_seen)
SELECT 10, 1, true, queryid, locktype, mode, database, relation, waits, wait_time_ms,
       '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'
  FROM (VALUES
    (1001, 'relation', 'AccessExclusiveLock', (SELECT oid FROM pg_database WHERE datname = current_database()),
     'regress_accounts'::regclass::oid, 3, 45.5),
    (1001, 'tuple', 'ExclusiveLock', 1::oid, 1259::oid, 1, 4.25),
    (1001, 'transactionid', 'ShareLock', 0::oid, 0::oid, 2, 10),
    (0, 'relation', 'AccessShareLock', (SELECT oid FROM pg_database WHERE datname = current_database()),
     'regress_accounts'::regclass::oid, 1, 0.75)
  ) AS v(queryid, locktype, mode, database, relation, waits, wait_time_ms);
INSERT INTO bpf_stats.query_lwlock_waits
  (userid, dbid, toplevel, queryid, tranche, mode, waits, wait_time_ms, stats_since, last_seen)
VALUES
  (10, 1, true, 1001, 'BufferContent', 'exclusive', 5, 1.5, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1001, 'WALWrite', 'exclusive', 2, 0.0625, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1003, 'tranche 42', 'unknown', 1, 0.001, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00');
-- mean_wait_ms: 45.5/3 = 15.1666..., 4.25/1 = 4.25, 10/2 = 5, 0.75/1 = 0.75.
SELECT queryid, query, locktype, mode, relation,
       CASE WHEN database = (SELECT oid FROM pg_database WHERE datname = current_database())
            THEN 'this database' ELSE database::text END AS database,
       waits, wait_time_ms, mean_wait_ms
  FROM bpf_stats.query_lock_detail ORDER BY queryid, wait_time_ms DESC;
-- mean_wait_ms: 1.5/5 = 0.3, 0.0625/2 = 0.03125, 0.001/1 = 0.001.
SELECT queryid, query, tranche, mode, waits, wait_time_ms, mean_wait_ms
  FROM bpf_stats.query_lwlock_detail ORDER BY queryid, wait_time_ms DESC;
-- query_wait_events: 1001's wait events as written (the '' row is sleeps without a wait event),
-- and its NULL row: on_cpu_ms + runq_wait_ms + those sleeps = 80 + 20 + 0.5 = 100.5, with their
-- 3 waits. 1002 has no event row: its NULL row is 0.25 + 0.125 = 0.375, 0 waits. 1003: 0.
INSERT INTO bpf_stats.query_wait_event_stats
  (userid, dbid, toplevel, queryid, wait_event_type, wait_event, waits, wait_time_ms, stats_since, last_seen)
VALUES
  (10, 1, true, 1001, 'Lock', 'transactionid', 3, 30, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1001, 'IO', 'DataFileRead', 64, 49.5, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1001, '', '', 3, 0.5, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
  (10, 1, true, 1001, 'Extension', '#3', 1, 0.25, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00');
SELECT queryid, wait_event_type, wait_event, waits, wait_time_ms
  FROM bpf_stats.query_wait_events WHERE queryid BETWEEN 1001 AND 1003
 ORDER BY queryid, wait_time_ms DESC;
-- query_locks: 1001 (lock_wait_share 30/200 = 0.15, lwlock 10/200 = 0.05; 3+1+2 = 6 lock
-- waits, 5+2 = 7 LWLock waits, details longest first, rounded to 0.1 ms and 0.001 ms: 4.25
-- shows as 4.3, 0.0625 as 0.063) and 1003 (no wait time, but an LWLock detail row).
-- 1002 waited for nothing and is absent; queryid 0 has no query_stats row.
SELECT queryid, calls, total_time_ms, lock_wait_ms, lwlock_wait_ms, spinlock_delays,
       lock_wait_share, lwlock_wait_share, lock_waits, lwlock_waits
  FROM bpf_stats.query_locks ORDER BY queryid;
SELECT queryid, lock_detail, lwlock_detail FROM bpf_stats.query_locks ORDER BY queryid;
--
-- Histograms: 256 log-linear buckets; counts[i] counts observations from
-- hist_bucket_lower_us(i - 1, 256) us (1 us wide below 16 us; slot 8g + m from (8 + m) * 2^(g-1) us).
-- A quantile is interpolated in its bucket (the max closing the bucket that holds it), then kept
-- within [top * 0.9, lower * 1.1] when that range is not empty.
-- 1001 query_latency: 10 in counts[65] = [1024, 1152) us, 10 in counts[89] = [8192, 9216) us, max 9 ms.
--   p50: rank 10, the top of counts[65], 1152 us, kept at 1024 * 1.1 = 1126.4 us = 1.1264 ms.
--   p95: rank 19, 9/10 into [8192, 9000) (closed by the max): 8919.2 us = 8.9192 ms.
--   p99: rank 19.8: 8192 + 808 * 0.98 = 8983.84 us.
-- 1002 query_latency: 4 in counts[2] = [1, 2) us, max 0.00195 ms: [1, 1.95) too wide to keep
--   within 10%: p50 1 + 0.95 * 2/4 = 1.475 us; p95 1 + 0.95 * 0.95 = 1.9025 us; p99 1.9405 us.
-- 1001 runq: 3 in counts[6] = [5, 6) us, 1 in counts[21] = [24, 26) us, max 0.025 ms.
--   p50: rank 2 of 3: 5 + 2/3 us, kept at 5 * 1.1 = 5.5 us; p95: rank 3.8, 0.8 into [24, 25):
--   24.8 us; p99: 24.96 us.
-- 1001 io: in neither view.
-- 1004 query_latency: no query_stats row, so calls is NULL. One observation in counts[138] =
--   [589824, 655360) us, closed by max_ms 600 at 600000 us: p50 589824 + 10176 * 0.5 =
--   594912 us, p95 599491.2 us, p99 599898.24 us.
INSERT INTO bpf_stats.query_histograms
  (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms, stats_since, last_seen)
SELECT 10, 1, true, queryid, kind,
       array(SELECT coalesce((buckets -> i::text)::bigint, 0) FROM generate_series(1, 256) i),
       observations, max_ms, '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'
  FROM (VALUES
    (1001, 'query_latency', '{"65": 10, "89": 10}'::jsonb, 20, 9),
    (1002, 'query_latency', '{"2": 4}'::jsonb, 4, 0.00195),
    (1001, 'runq', '{"6": 3, "21": 1}'::jsonb, 4, 0.025),
    (1001, 'io', '{"8": 64}'::jsonb, 64, 0.1),
    (1004, 'query_latency', '{"138": 1}'::jsonb, 1, 600)
  ) AS v(queryid, kind, buckets, observations, max_ms);
SELECT queryid, calls, observations, p50_ms, p95_ms, p99_ms, max_ms
  FROM bpf_stats.query_latency ORDER BY queryid;
SELECT queryid, array_length(counts, 1) AS buckets FROM bpf_stats.query_latency WHERE queryid = 1001;
SELECT * FROM bpf_stats.hist_buckets((SELECT counts FROM bpf_stats.query_latency WHERE queryid = 1001), 9);
SELECT queryid, waits, p50_ms, p95_ms, p99_ms, max_ms FROM bpf_stats.query_runq_latency ORDER BY queryid;
-- Another length is refused: the log2 layout lives in query_histograms_log2 only.
DO $$
BEGIN
  INSERT INTO bpf_stats.query_histograms (userid, dbid, toplevel, queryid, kind, counts, observations, max_ms)
  VALUES (10, 1, true, 1005, 'query_latency', array_fill(0::bigint, ARRAY[32]), 0, 0);
EXCEPTION WHEN check_violation THEN
  RAISE NOTICE 'refused: %', SQLERRM;
END
$$;
--
-- hist_quantile(counts, q, max_ms) on its own (milliseconds), the histogram of 1001 above with max 100.
--   q 0: the bottom of counts[65], 1024 us, kept at 1152 * 0.9 = 1036.8 us = 1.0368 ms;
--   q 0.25 (rank 5 of 10 in [1024, 1152)): 1088 us; q 0.5: 1126.4 us (as p50 above);
--   q 1: the top of [8192, 9216), kept at 8192 * 1.1 = 9011.2 us; a NULL max_ms closes nothing:
--   q 0.99 is 8192 + 1024 * 0.98 = 9195.52 us, kept at 9011.2 as well;
--   an empty or all-zero histogram, an array of another length and q outside 0..1 give NULL.
SELECT q, bpf_stats.hist_quantile(array_fill(0::bigint, ARRAY[64]) || 10::bigint || array_fill(0::bigint, ARRAY[23]) || 10::bigint || array_fill(0::bigint, ARRAY[167]), q, 100) AS ms
  FROM unnest(ARRAY[0, 0.25, 0.5, 1, -0.1, 1.5]::float8[]) AS q;
SELECT bpf_stats.hist_quantile(array_fill(0::bigint, ARRAY[64]) || 10::bigint || array_fill(0::bigint, ARRAY[23]) || 10::bigint || array_fill(0::bigint, ARRAY[167]), 0.99, NULL) AS unclamped,
       bpf_stats.hist_quantile('{}', 0.5, 1) AS empty,
       bpf_stats.hist_quantile(array_fill(0::bigint, ARRAY[256]), 0.5, 1) AS all_zero,
       bpf_stats.hist_quantile(array_fill(1::bigint, ARRAY[100]), 0.5, 1) AS other_length;
-- The log2 layout (32 buckets, query_histograms_log2): counts[i] = [2^(i-1), 2^i) us, counts[1]
-- from 0; 10 in [1024, 2048) us and 10 in [8192, 16384) us. Too wide to keep within 10%:
--   q 0.25: 1024 + 1024 * 5/10 = 1536 us; q 0.99: 8192 + 8192 * 0.98 = 16220.16 us (max 100 ms).
SELECT bpf_stats.hist_quantile(array_fill(0::bigint, ARRAY[10]) || 10::bigint || '{0,0}'::bigint[] || 10::bigint || array_fill(0::bigint, ARRAY[18]), 0.25, 100) AS log2_p25,
       bpf_stats.hist_quantile(array_fill(0::bigint, ARRAY[10]) || 10::bigint || '{0,0}'::bigint[] || 10::bigint || array_fill(0::bigint, ARRAY[18]), 0.99, 100) AS log2_p99;
--
-- Query text: the collector copies the node's pg_stat_statements entry into query_texts (as
-- here, from the test database's own), and the views carry it for the row with that key.
SELECT 'the regression marker' AS marker;
INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid, total_time_ms, on_cpu_ms)
SELECT userid, dbid, toplevel, queryid, 3, 3
  FROM pg_stat_statements
 WHERE query = 'SELECT $1 AS marker' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
INSERT INTO bpf_stats.query_texts (userid, dbid, toplevel, queryid, query)
SELECT userid, dbid, toplevel, queryid, query
  FROM pg_stat_statements
 WHERE query = 'SELECT $1 AS marker' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT query, total_time_ms, on_cpu_share FROM bpf_stats.query_time WHERE queryid NOT IN (1001, 1002, 1003);
--
-- activity: pg_stat_activity joined live with backend_stats on pid, and on backend_start within
-- a second (here 0.5 s off); a row of an earlier process with the same pid (an hour older) and
-- one that exited must not join. Metric columns come from the matching row only. Rows join
-- only for a node whose collector holds a session on this server: this session plays it
-- (the application_name and health row a collector of pid 4242 on regress-host has).
SET application_name = 'pg-bpf-stats (pid 4242 on regress-host)';
INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms)
VALUES ('regress-host', 4242, '0', 1, '{cpu}', '2025-01-01 00:00:00+00', 1000);
INSERT INTO bpf_stats.backend_stats
  (pid, backend_start, backend_type, datid, usesysid, queryid, total_time_ms, on_cpu_ms,
   runq_wait_ms, io_wait_ms, lock_wait_ms, lwlock_wait_ms, reclaim_ms, other_wait_ms, minflt,
   majflt, cpu_migrations, nvcsw, nivcsw, last_seen, exited_at)
SELECT pid, backend_start + start_offset, backend_type, datid, usesysid, 1001, total_time_ms,
       total_time_ms / 2, total_time_ms / 4, 0, 0, 0, NULL, total_time_ms / 4, 10, 1, 2, 3, 4,
       '2025-01-01 00:10:00+00', exited_at
  FROM pg_stat_activity,
       (VALUES (interval '0.5 second', 12.5, NULL::timestamptz),
               (interval '-1 hour', 99, NULL),
               (interval '0', 77, '2025-01-01 00:05:00+00')) AS v(start_offset, total_time_ms, exited_at)
 WHERE pid = pg_backend_pid();
SELECT backend_type, datname = current_database() AS this_database, usename, state,
       wait_event_type, wait_event, total_time_ms, on_cpu_ms, runq_wait_ms, io_wait_ms,
       lock_wait_ms, lwlock_wait_ms, reclaim_ms, other_wait_ms, minflt, majflt,
       cpu_migrations, nvcsw, nivcsw, last_seen
  FROM bpf_stats.activity WHERE pid = pg_backend_pid();
