-- Latency histograms and LLC views. Re-applied when sql/ changed (CREATE OR REPLACE).

-- bpf_stats.hist_quantile(counts bigint[], q double precision, max_ms double precision)
--   RETURNS double precision
-- The q-quantile (q from 0 to 1), in milliseconds, of a log2 histogram whose counts[i] counts
-- observations in [2^(i-1), 2^i) microseconds (counts[1] from 0), as query_histograms.counts.
-- max_ms is the exact largest observation (query_histograms.max_ms). The quantile's bucket is
-- exact; inside it the value is interpolated linearly and clamped to max_ms, so it is within a
-- factor of 2 of the truth (the bucket's width) and never above max_ms. NULL for an empty
-- histogram or a q outside 0..1.
CREATE OR REPLACE FUNCTION bpf_stats.hist_quantile(counts bigint[], q double precision, max_ms double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- Pinned: views call it as their reader, with the reader's path; ^, *, sum() must be the catalog's.
SET search_path = pg_catalog, pg_temp
AS $$
WITH s AS (
  SELECT i - 1 AS slot, c::float8 AS c,
         sum(c) OVER (ORDER BY i)::float8 AS cum,
         sum(c) OVER ()::float8 AS total
    FROM unnest(counts) WITH ORDINALITY AS u(c, i)
)
SELECT least(max_ms,
             (CASE WHEN slot = 0 THEN 0 ELSE 2 ^ slot END
              + (2 ^ (slot + 1) - CASE WHEN slot = 0 THEN 0 ELSE 2 ^ slot END)
                * (q * total - (cum - c)) / c) / 1000.0)
  FROM s
 WHERE c > 0 AND cum >= q * total AND q BETWEEN 0 AND 1
 ORDER BY slot
 LIMIT 1
$$;

-- Statement latency (query_start .. state_change of each statement, read when the backend
-- went idle). observations: statements measured; calls: exact counts (query set) or NULL.
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_latency AS
  SELECT h.node, h.userid, h.dbid, h.toplevel, h.queryid, %s AS query,
         (SELECT q.calls FROM bpf_stats.query_stats q
           WHERE (q.node, q.userid, q.dbid, q.toplevel, q.queryid) = (h.node, h.userid, h.dbid, h.toplevel, h.queryid)) AS calls,
         h.observations,
         bpf_stats.hist_quantile(h.counts, 0.50, h.max_ms) AS p50_ms,
         bpf_stats.hist_quantile(h.counts, 0.95, h.max_ms) AS p95_ms,
         bpf_stats.hist_quantile(h.counts, 0.99, h.max_ms) AS p99_ms,
         h.max_ms, h.counts, h.stats_since, h.last_seen
    FROM bpf_stats.query_histograms h %s
   WHERE h.kind = 'query_latency'
$sql$);

-- Run-queue latency: each wait for a CPU of a backend on this query (sched set).
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_runq_latency AS
  SELECT h.node, h.userid, h.dbid, h.toplevel, h.queryid, %s AS query, h.observations AS waits,
         bpf_stats.hist_quantile(h.counts, 0.50, h.max_ms) AS p50_ms,
         bpf_stats.hist_quantile(h.counts, 0.95, h.max_ms) AS p95_ms,
         bpf_stats.hist_quantile(h.counts, 0.99, h.max_ms) AS p99_ms,
         h.max_ms, h.counts, h.stats_since, h.last_seen
    FROM bpf_stats.query_histograms h %s
   WHERE h.kind = 'runq'
$sql$);

-- LLC references and misses (llc set; NULL where it never ran, e.g. no hardware PMU).
SELECT bpf_stats.create_view_with_query_text($sql$
  CREATE OR REPLACE VIEW bpf_stats.query_llc AS
  SELECT q.node, q.userid, q.dbid, q.toplevel, q.queryid, %s AS query, q.calls,
         q.llc_references, q.llc_misses,
         q.llc_misses::float8 / nullif(q.llc_references, 0) AS llc_miss_ratio,
         q.stats_since, q.last_seen
    FROM bpf_stats.query_stats q %s
$sql$);
