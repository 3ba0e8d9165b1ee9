-- Up Migration

-- What each history interval added to query_histograms, per (node, query key, kind), so that
-- percentiles can be read for any period (`report` compares two). Like query_stats_history:
-- appended, partitioned by ts (bpf_stats.maintain_history makes and drops the partitions), a
-- key's rows deleted with the key (src/health/row-retention.ts), a node role may only append.
-- Only keys whose histogram changed in the interval get a row, and only the non-zero buckets:
-- a statement's latencies usually fall in a few dozen of the 256 buckets, so bucket numbers and
-- their counts side by side cost a fraction of the whole array (docs/measured.md).
CREATE TABLE bpf_stats.query_histogram_history (
  ts            timestamptz      NOT NULL,
  node          text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  userid        oid              NOT NULL,
  dbid          oid              NOT NULL,
  toplevel      boolean          NOT NULL,
  queryid       bigint           NOT NULL,
  kind          text             NOT NULL,
  -- 0-based bucket numbers of query_histograms.counts (counts[bucket + 1] there), ascending.
  buckets       smallint[]       NOT NULL,
  counts        bigint[]         NOT NULL,
  observations  bigint           NOT NULL,
  max_so_far_ms double precision NOT NULL,
  CHECK (cardinality(buckets) = cardinality(counts) AND cardinality(buckets) BETWEEN 1 AND 256)
) PARTITION BY RANGE (ts);

CREATE INDEX query_histogram_history_key ON bpf_stats.query_histogram_history (queryid, ts);

-- Down Migration

DROP TABLE bpf_stats.query_histogram_history;
