-- Up Migration

-- What this host and this Postgres support, as `pg-bpf-stats check` prints it: one row per
-- requirement, feature and probe set, replaced by each sidecar start on that host. `host` lets
-- several collectors (a failover pair, a host rebuilt under a new name) share one database
-- without overwriting each other's verdicts.
CREATE TABLE bpf_stats.capabilities (
  host       text        NOT NULL,
  kind       text        NOT NULL CHECK (kind IN ('requirement', 'feature', 'probe set')),
  probe      text        NOT NULL,
  available  boolean     NOT NULL,
  required   boolean     NOT NULL,
  reason     text        NOT NULL,
  checked_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (host, kind, probe)
);

-- One row per running collector process, written in the same transaction as each flush.
CREATE TABLE bpf_stats.health (
  host           text             NOT NULL,
  pid            integer          NOT NULL,
  version        text             NOT NULL,
  postmaster_pid integer          NOT NULL,
  probe_sets     text[]           NOT NULL,
  started_at     timestamptz      NOT NULL,
  interval_ms    double precision NOT NULL,
  last_flush_at  timestamptz,
  flush_ms       double precision,
  flushes        bigint           NOT NULL DEFAULT 0,
  rows_written   bigint           NOT NULL DEFAULT 0,
  last_rows      integer          NOT NULL DEFAULT 0,
  dropped_events bigint           NOT NULL DEFAULT 0,
  dropped        jsonb            NOT NULL DEFAULT '{}',
  map_fill_pct   double precision NOT NULL DEFAULT 0,
  map_fill       jsonb            NOT NULL DEFAULT '{}',
  pending_rows   integer          NOT NULL DEFAULT 0,
  failed_flushes bigint           NOT NULL DEFAULT 0,
  last_error     text,
  last_error_at  timestamptz,
  history_retention interval,
  updated_at     timestamptz      NOT NULL DEFAULT now(),
  stopped_at     timestamptz,
  PRIMARY KEY (host, pid)
);

-- Per-interval increments: the rows each flush adds to query_stats / backend_stats, stamped
-- with the flush time. Range-partitioned by ts so that retention drops whole partitions
-- (bpf_stats.maintain_history in sql/60-health.sql creates them ahead and drops old ones).
-- Metric columns added to query_stats later are added here by sql/60-health.sql.
CREATE TABLE bpf_stats.query_stats_history (
  ts              timestamptz      NOT NULL,
  userid          oid              NOT NULL,
  dbid            oid              NOT NULL,
  toplevel        boolean          NOT NULL,
  queryid         bigint           NOT NULL,
  calls           bigint,
  total_time_ms   double precision,
  on_cpu_ms       double precision,
  runq_wait_ms    double precision,
  io_wait_ms      double precision,
  lock_wait_ms    double precision,
  lwlock_wait_ms  double precision,
  reclaim_ms      double precision,
  other_wait_ms   double precision,
  minflt          bigint,
  majflt          bigint,
  blk_read_ios    bigint,
  blk_read_bytes  bigint,
  blk_write_ios   bigint,
  blk_write_bytes bigint,
  llc_references  bigint,
  llc_misses      bigint,
  cpu_migrations  bigint,
  nvcsw           bigint,
  nivcsw          bigint,
  reclaim_pages         bigint,
  compaction_stall_ms   double precision,
  writeback_throttle_ms double precision,
  spinlock_delays       bigint
) PARTITION BY RANGE (ts);

CREATE INDEX query_stats_history_key ON bpf_stats.query_stats_history (queryid, ts);

CREATE TABLE bpf_stats.backend_stats_history (
  ts              timestamptz      NOT NULL,
  pid             integer          NOT NULL,
  backend_start   timestamptz      NOT NULL,
  backend_type    text             NOT NULL,
  datid           oid,
  usesysid        oid,
  queryid         bigint,
  calls           bigint,
  total_time_ms   double precision,
  on_cpu_ms       double precision,
  runq_wait_ms    double precision,
  io_wait_ms      double precision,
  lock_wait_ms    double precision,
  lwlock_wait_ms  double precision,
  reclaim_ms      double precision,
  other_wait_ms   double precision,
  minflt          bigint,
  majflt          bigint,
  blk_read_ios    bigint,
  blk_read_bytes  bigint,
  blk_write_ios   bigint,
  blk_write_bytes bigint,
  llc_references  bigint,
  llc_misses      bigint,
  cpu_migrations  bigint,
  nvcsw           bigint,
  nivcsw          bigint,
  reclaim_pages         bigint,
  compaction_stall_ms   double precision,
  writeback_throttle_ms double precision,
  spinlock_delays       bigint
) PARTITION BY RANGE (ts);

-- Down Migration

DROP TABLE bpf_stats.backend_stats_history;
DROP TABLE bpf_stats.query_stats_history;
DROP TABLE bpf_stats.health;
DROP TABLE bpf_stats.capabilities;
