-- Latency histograms and LLC views. Re-applied when sql/ changed (CREATE OR REPLACE).

-- bpf_stats.hist_bucket_lower_us(slot integer, slots integer) RETURNS double precision
-- The lower bound in microseconds of bucket `slot` (0-based) of a histogram of `slots` buckets,
-- by the layout that length means (src/collector/histogram-layout.ts):
--   256: log-linear (query_histograms), 8 buckets per power of two: slots 0..15 are 1 us wide,
--        then slot 8g + m (g >= 1) starts at (8 + m) * 2^(g-1) us;
--   32:  log2 (query_histograms_log2, rows from before migration 1764600000000): slot i starts
--        at 2^i us, slot 0 at 0.
-- Infinity for slot = slots (the end of the last bucket, which takes everything above its
-- start); NULL for any other length.
CREATE OR REPLACE FUNCTION bpf_stats.hist_bucket_lower_us(slot integer, slots integer)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
         WHEN slot >= slots THEN 'Infinity'::float8
         WHEN slots = 256 THEN CASE WHEN slot < 8 THEN slot::float8
                                    ELSE (8 + slot % 8) * 2 ^ (slot / 8 - 1) END
         WHEN slots = 32 THEN CASE WHEN slot = 0 THEN 0 ELSE 2 ^ slot END
       END
$$;

-- bpf_stats.hist_buckets(counts bigint[], max_ms double precision)
--   RETURNS TABLE (bucket integer, lower_ms double precision, upper_ms double precision, count bigint)
-- The buckets of a histogram (either layout) that hold observations, with their bounds in
-- milliseconds: for a heatmap, or to check a percentile by hand. The last bucket's upper_ms is
-- max_ms, the exact largest observation.
CREATE OR REPLACE FUNCTION bpf_stats.hist_buckets(counts bigint[], max_ms double precision)
RETURNS TABLE (bucket integer, lower_ms double precision, upper_ms double precision, count bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT u.i::integer - 1,
       bpf_stats.hist_bucket_lower_us(u.i::integer - 1, cardinality(counts)) / 1000.0,
       least(bpf_stats.hist_bucket_lower_us(u.i::integer, cardinality(counts)) / 1000.0, max_ms),
       u.c
  FROM unnest(counts) WITH ORDINALITY AS u(c, i)
 WHERE u.c > 0
 ORDER BY u.i
$$;

-- bpf_stats.hist_quantile(counts bigint[], q double precision, max_ms double precision)
--   RETURNS double precision
-- The q-quantile (q from 0 to 1), in milliseconds, of a histogram of either layout
-- (hist_bucket_lower_us): query_histograms.counts or query_histograms_log2.counts. max_ms is
-- the exact largest observation. The first bucket whose cumulative count reaches q * total
-- holds the quantile (the exact value of rank ceil(q * total) is in it too); inside it the
-- value is interpolated linearly between the bucket's bounds (max_ms closing the bucket that
-- holds it), then kept within [top * 0.9, lower * 1.1], the points within 10% of every value
-- the bucket can hold, wherever that range is not empty: always for log-linear buckets from
-- 16 us on (at most 1/8 of their lower bound wide), so the quantile is within 10% of the
-- exact value; 1 us below 16 us; up to a factor of 2 for log2 buckets, mostly too wide to keep
-- (src/collector/histogram-layout.ts, docs/percentiles.md). NULL for an empty
-- histogram, a q outside 0..1 or an array of another length.
CREATE OR REPLACE FUNCTION bpf_stats.hist_quantile(counts bigint[], q double precision, max_ms double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- Pinned: views call it as their reader, with the reader's path; ^, *, sum() must be the catalog's.
SET search_path = pg_catalog, pg_temp
AS $$
WITH s AS (
  SELECT i::integer - 1 AS slot, c::float8 AS c,
         sum(c) OVER (ORDER BY i)::float8 AS cum,
         sum(c) OVER ()::float8 AS total
    FROM unnest(counts) WITH ORDINALITY AS u(c, i)
), b AS (
  SELECT s.*, bpf_stats.hist_bucket_lower_us(slot, cardinality(counts)) AS lo,
         bpf_stats.hist_bucket_lower_us(slot + 1, cardinality(counts)) AS hi
    FROM s
   WHERE c > 0 AND cum >= q * total AND q BETWEEN 0 AND 1
   ORDER BY slot
   LIMIT 1
)
SELECT least(max_ms,
             CASE WHEN top * 0.9 <= lo * 1.1 THEN least(lo * 1.1, greatest(top * 0.9, v)) ELSE v END / 1000.0)
  FROM b,
       -- The exact max closes the bucket that holds it; without one, the bucket's own bound
       -- (the last bucket, unbounded, then reads as its lower bound).
       LATERAL (SELECT CASE WHEN max_ms IS NOT NULL THEN least(hi, greatest(max_ms * 1000.0, lo))
                            WHEN hi < 'Infinity'::float8 THEN hi ELSE lo END AS top) t,
       LATERAL (SELECT lo + (top - lo) * (q * total - (cum - c)) / c AS v) i
 WHERE lo IS NOT NULL
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
