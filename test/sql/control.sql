--
-- The SQL side of the control plane, the history's retention and the state tables, without a
-- collector: what the functions check and write, and what the tables' constraints refuse.
-- The session is a superuser, so it counts as a member of bpf_stats_admin. Errors show their
-- message only: their detail would show now().
\set VERBOSITY terse
--
-- collect() validates its input at once and returns the request id (1, 2: a fresh identity).
-- Rows name their node from the session, as the collector's connections do (run --node).
SET bpf_stats.node = 'node-a';
SELECT bpf_stats.collect('{query,locks}', interval '60 seconds') AS id;
SELECT bpf_stats.collect() AS id;
SELECT bpf_stats.collect('{}');
SELECT bpf_stats.collect('{query,NULL}');
SELECT bpf_stats.collect(ARRAY[repeat('x', 64)]);
SELECT bpf_stats.collect('{query}', interval '0');
SELECT bpf_stats.collect('{query}', interval '24 hours 1 second');
-- 'default' is the default probe list; NULL duration means until stop(), all pending.
SELECT id, requested_by, probes, duration, status, started_at, finished_at, error
  FROM bpf_stats.collections ORDER BY id;
-- stop(): true for a pending or running request, false once it has ended, an error for no such id.
SELECT bpf_stats.stop(1);
SELECT bpf_stats.stop(1);
SELECT bpf_stats.stop(99);
SELECT id, status, finished_at IS NOT NULL AS finished FROM bpf_stats.collections ORDER BY id;
-- The status is one of the six the sidecar knows.
UPDATE bpf_stats.collections SET status = 'paused' WHERE id = 2;
--
-- History retention. A partition from 1970 is older than any retention and is dropped whole;
-- partitions one hour wide are created from the current hour to two hours ahead (2 or 3 of
-- them, depending on where in the hour we are) for each history table (the queries', the
-- backends', their wait events' and the query histograms').
CREATE TABLE bpf_stats.query_stats_history_0_3600 PARTITION OF bpf_stats.query_stats_history
  FOR VALUES FROM ('1970-01-01 00:00:00+00') TO ('1970-01-01 01:00:00+00');
SELECT created BETWEEN 2 * t.n AND 3 * t.n AS created_every_table, dropped
  FROM bpf_stats.maintain_history(interval '1 day', interval '1 hour'),
       (SELECT count(*) AS n FROM pg_class WHERE relnamespace = 'bpf_stats'::regnamespace AND relkind = 'p' AND relname LIKE '%\_history') t;
-- Every history table has them.
SELECT p.relname AS history_table, count(*) FILTER (WHERE c.relname ~ '_\d+_\d+$') BETWEEN 2 AND 3 AS partitions_ahead
  FROM pg_class p JOIN pg_inherits i ON i.inhparent = p.oid JOIN pg_class c ON c.oid = i.inhrelid
 WHERE p.relnamespace = 'bpf_stats'::regnamespace AND p.relkind = 'p'
 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS old_partitions FROM pg_class WHERE relname = 'query_stats_history_0_3600';
-- A flush's increments go in at the current time; a row older than every partition has nowhere
-- to go.
INSERT INTO bpf_stats.query_stats_history (ts, userid, dbid, toplevel, queryid, total_time_ms, on_cpu_ms)
VALUES (now(), 10, 1, true, 1001, 2, 1.5), (now(), 10, 1, true, 1001, 3, 2.5);
SELECT queryid, sum(total_time_ms) AS total_time_ms, sum(on_cpu_ms) AS on_cpu_ms, sum(calls) AS calls
  FROM bpf_stats.query_stats_history GROUP BY queryid;
INSERT INTO bpf_stats.query_stats_history (ts, userid, dbid, toplevel, queryid)
VALUES ('1970-01-01 00:30:00+00', 10, 1, true, 1001);
-- A width under a second is refused.
SELECT * FROM bpf_stats.maintain_history(interval '1 day', interval '0');
--
-- capabilities: kind is one of three; health starts from zero counters.
INSERT INTO bpf_stats.capabilities (host, kind, probe, available, required, reason)
VALUES ('regress-host', 'probe set', 'llc', false, false, 'no hardware PMU');
INSERT INTO bpf_stats.capabilities (host, kind, probe, available, required, reason)
VALUES ('regress-host', 'gadget', 'llc', false, false, 'not a kind');
SELECT host, kind, probe, available, required, reason FROM bpf_stats.capabilities;
INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms)
VALUES ('regress-host', 4242, '0.0.0', 1, '{cpu,memory,io}', '2025-01-01 00:00:00+00', 1000);
SELECT host, pid, probe_sets, interval_ms, last_flush_at, flush_ms, flushes, rows_written,
       last_rows, dropped_events, dropped, map_fill_pct, map_fill, pending_rows, failed_flushes,
       last_error, history_retention, stopped_at
  FROM bpf_stats.health;
