-- Up Migration

-- Per-interval increments of the wait-event tables (migrations/1764500000000_wait-events.sql),
-- as query_stats_history / backend_stats_history are of query_stats / backend_stats: one row
-- per key changed in a history interval (run --history-interval), stamped with the flush that
-- wrote it, in the same statement as the cumulative rows, so a key's history sums to its
-- cumulative row. Range-partitioned by ts: bpf_stats.maintain_history (sql/60-health.sql)
-- creates and drops their partitions with the other history tables'. A query key's rows go
-- with its query_stats row (row retention), a process's with their partitions.
CREATE TABLE bpf_stats.query_wait_event_stats_history (
  ts              timestamptz      NOT NULL,
  node            text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  userid          oid              NOT NULL,
  dbid            oid              NOT NULL,
  toplevel        boolean          NOT NULL,
  queryid         bigint           NOT NULL,
  wait_event_type text             NOT NULL,
  wait_event      text             NOT NULL,
  waits           bigint           NOT NULL,
  wait_time_ms    double precision NOT NULL,
  runq_after_ms   double precision NOT NULL
) PARTITION BY RANGE (ts);

CREATE INDEX query_wait_event_stats_history_key ON bpf_stats.query_wait_event_stats_history (queryid, ts);

CREATE TABLE bpf_stats.backend_wait_event_stats_history (
  ts              timestamptz      NOT NULL,
  node            text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  pid             integer          NOT NULL,
  backend_start   timestamptz      NOT NULL,
  wait_event_type text             NOT NULL,
  wait_event      text             NOT NULL,
  waits           bigint           NOT NULL,
  wait_time_ms    double precision NOT NULL,
  runq_after_ms   double precision NOT NULL
) PARTITION BY RANGE (ts);

-- Down Migration

DROP TABLE bpf_stats.backend_wait_event_stats_history;
DROP TABLE bpf_stats.query_wait_event_stats_history;
