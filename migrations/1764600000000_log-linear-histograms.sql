-- Up Migration

-- query_histograms.counts change layout: from log2 (32 slots, counts[i] = [2^(i-1), 2^i) us,
-- counts[1] from 0) to log-linear (256 slots, 8 per power of two, bpf/records.h; docs/percentiles.md).
-- A log2 count cannot be split into the finer buckets without inventing where inside its power
-- of two each observation was, so nothing is converted: the rows written so far move unchanged
-- to query_histograms_log2, where bpf_stats.hist_quantile() still reads them (it tells the two
-- layouts apart by the array's length), and query_histograms starts again, empty, with
-- stats_since of its new rows.
CREATE TABLE bpf_stats.query_histograms_log2 (LIKE bpf_stats.query_histograms INCLUDING DEFAULTS);
ALTER TABLE bpf_stats.query_histograms_log2 ADD PRIMARY KEY (node, userid, dbid, toplevel, queryid, kind);
INSERT INTO bpf_stats.query_histograms_log2 SELECT * FROM bpf_stats.query_histograms;
DELETE FROM bpf_stats.query_histograms;

-- A collector of the log2 layout still writing here (another node of a sink, not yet
-- upgraded) is refused, rather than having its 32 slots added to the first 32 of 256.
ALTER TABLE bpf_stats.query_histograms
  ADD CONSTRAINT query_histograms_log_linear CHECK (cardinality(counts) = 256);

-- Down Migration

ALTER TABLE bpf_stats.query_histograms DROP CONSTRAINT query_histograms_log_linear;
-- The log-linear rows mean nothing to the code before this migration; the log2 rows come back.
DELETE FROM bpf_stats.query_histograms;
INSERT INTO bpf_stats.query_histograms SELECT * FROM bpf_stats.query_histograms_log2;
DROP TABLE bpf_stats.query_histograms_log2;
