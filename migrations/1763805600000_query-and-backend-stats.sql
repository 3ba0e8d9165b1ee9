-- Up Migration

-- Cumulative per-query figures, keyed exactly like pg_stat_statements. Milliseconds are
-- double precision like pg_stat_statements; counts and bytes are bigint. A NULL means "not
-- measured" (the probe set that fills it is off or unsupported here), never zero.
CREATE TABLE bpf_stats.query_stats (
  userid          oid              NOT NULL,
  dbid            oid              NOT NULL,
  toplevel        boolean          NOT NULL,
  queryid         bigint           NOT NULL,
  calls           bigint,
  total_time_ms   double precision NOT NULL DEFAULT 0,
  on_cpu_ms       double precision NOT NULL DEFAULT 0,
  runq_wait_ms    double precision NOT NULL DEFAULT 0,
  io_wait_ms      double precision NOT NULL DEFAULT 0,
  lock_wait_ms    double precision NOT NULL DEFAULT 0,
  lwlock_wait_ms  double precision NOT NULL DEFAULT 0,
  reclaim_ms      double precision,
  other_wait_ms   double precision NOT NULL DEFAULT 0,
  minflt          bigint           NOT NULL DEFAULT 0,
  majflt          bigint           NOT NULL DEFAULT 0,
  blk_read_ios    bigint,
  blk_read_bytes  bigint,
  blk_write_ios   bigint,
  blk_write_bytes bigint,
  llc_references  bigint,
  llc_misses      bigint,
  cpu_migrations  bigint           NOT NULL DEFAULT 0,
  nvcsw           bigint           NOT NULL DEFAULT 0,
  nivcsw          bigint           NOT NULL DEFAULT 0,
  stats_since     timestamptz      NOT NULL DEFAULT now(),
  last_seen       timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (userid, dbid, toplevel, queryid)
);

-- Cumulative per-backend figures. (pid, backend_start) survives pid reuse; backend_start is
-- pg_stat_activity.backend_start for backends, the process start for other postmaster children.
CREATE TABLE bpf_stats.backend_stats (
  pid             integer          NOT NULL,
  backend_start   timestamptz      NOT NULL,
  backend_type    text             NOT NULL,
  datid           oid,
  usesysid        oid,
  queryid         bigint,
  calls           bigint,
  total_time_ms   double precision NOT NULL DEFAULT 0,
  on_cpu_ms       double precision NOT NULL DEFAULT 0,
  runq_wait_ms    double precision NOT NULL DEFAULT 0,
  io_wait_ms      double precision NOT NULL DEFAULT 0,
  lock_wait_ms    double precision NOT NULL DEFAULT 0,
  lwlock_wait_ms  double precision NOT NULL DEFAULT 0,
  reclaim_ms      double precision,
  other_wait_ms   double precision NOT NULL DEFAULT 0,
  minflt          bigint           NOT NULL DEFAULT 0,
  majflt          bigint           NOT NULL DEFAULT 0,
  blk_read_ios    bigint,
  blk_read_bytes  bigint,
  blk_write_ios   bigint,
  blk_write_bytes bigint,
  llc_references  bigint,
  llc_misses      bigint,
  cpu_migrations  bigint           NOT NULL DEFAULT 0,
  nvcsw           bigint           NOT NULL DEFAULT 0,
  nivcsw          bigint           NOT NULL DEFAULT 0,
  last_seen       timestamptz      NOT NULL DEFAULT now(),
  exited_at       timestamptz,
  PRIMARY KEY (pid, backend_start)
);

CREATE INDEX backend_stats_live ON bpf_stats.backend_stats (pid) WHERE exited_at IS NULL;

-- Down Migration

DROP TABLE bpf_stats.backend_stats;
DROP TABLE bpf_stats.query_stats;
