-- Up Migration

-- Log2 histograms per query and kind, cumulative like query_stats. counts[i] (1-based) counts
-- observations in [2^(i-1), 2^i) microseconds (counts[1] from 0), HIST_SLOTS of them (bpf/pgstats.h).
-- kind: 'query_latency' (statement latency), 'runq' (run-queue waits), 'io' (block IO requests).
-- max_ms is the largest observation seen, exact (not a bucket bound).
CREATE TABLE bpf_stats.query_histograms (
  userid       oid              NOT NULL,
  dbid         oid              NOT NULL,
  toplevel     boolean          NOT NULL,
  queryid      bigint           NOT NULL,
  kind         text             NOT NULL,
  counts       bigint[]         NOT NULL,
  observations bigint           NOT NULL,
  max_ms       double precision NOT NULL,
  stats_since  timestamptz      NOT NULL DEFAULT now(),
  last_seen    timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (userid, dbid, toplevel, queryid, kind)
);

-- Down Migration

DROP TABLE bpf_stats.query_histograms;
