--
-- Several nodes in one bpf_stats (run --sink): each row names its node, keys include it, query
-- texts are per node, and collect() asks one node's collector.
\set VERBOSITY terse
-- The same query key on two nodes: two rows, never summed. node-a writes with its session
-- setting; node-b's rows are written by a session naming node-b.
SET bpf_stats.node = 'node-a';
INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid, calls, total_time_ms, on_cpu_ms)
VALUES (10, 1, true, 2001, 3, 30, 30);
INSERT INTO bpf_stats.query_texts (userid, dbid, toplevel, queryid, query)
VALUES (10, 1, true, 2001, 'SELECT abalance FROM pgbench_accounts WHERE aid = $1');
SET bpf_stats.node = 'node-b';
INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid, calls, total_time_ms, on_cpu_ms)
VALUES (10, 1, true, 2001, 5, 50, 25), (10, 1, true, 2002, 1, 1, 1);
-- node-b's text for 2001 differs: each node shows its own, and 2002 has none (NULL).
INSERT INTO bpf_stats.query_texts (userid, dbid, toplevel, queryid, query)
VALUES (10, 1, true, 2001, 'SELECT 2001 on node-b');
-- An upsert of node-b's 2001 adds to node-b's row only (calls 5 + 2 = 7); node-a keeps 3.
INSERT INTO bpf_stats.query_stats AS q (userid, dbid, toplevel, queryid, calls, total_time_ms, on_cpu_ms)
VALUES (10, 1, true, 2001, 2, 20, 10)
ON CONFLICT (node, userid, dbid, toplevel, queryid) DO UPDATE SET calls = q.calls + excluded.calls;
-- on_cpu_share: node-a 30/30 = 1, node-b 2001 25/50 = 0.5, 2002 1/1 = 1.
SELECT node, queryid, query, calls, total_time_ms, on_cpu_share FROM bpf_stats.query_time ORDER BY node, queryid;
-- Without a node in the session (never set, or reset to empty), a row cannot be written: it
-- would belong to nobody.
RESET bpf_stats.node;
INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid) VALUES (10, 1, true, 2003);
-- The activity view joins live pg_stat_activity with the rows of the nodes that measure this
-- server only; no collector holds a session here, so no row joins.
SELECT count(*) AS joined FROM bpf_stats.activity WHERE node IS NOT NULL;
SELECT count(*) AS local_nodes FROM bpf_stats.local_nodes();
-- collect(): with one running collector the request is its node's; with two, a node must be named.
SET bpf_stats.node = 'node-a';
INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms)
VALUES ('host-a', 101, '0', 1, '{cpu}', now(), 1000);
SELECT bpf_stats.collect('{query}', interval '10 seconds') AS id;
SET bpf_stats.node = 'node-b';
INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms)
VALUES ('host-b', 102, '0', 1, '{cpu}', now(), 1000);
SELECT bpf_stats.collect('{query}', interval '10 seconds');
SELECT bpf_stats.collect('{query}', interval '10 seconds', node => 'node-b') AS id;
-- A collector stopped (or silent for longer than 3 intervals, at least a minute) no longer counts.
UPDATE bpf_stats.health SET stopped_at = now() WHERE node = 'node-b';
SELECT bpf_stats.collect('{locks}') AS id;
SELECT id, probes, duration, status, node FROM bpf_stats.collections ORDER BY id;
