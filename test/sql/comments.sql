--
-- Every table, view, column and function of bpf_stats documents itself (sql/90-comments.sql).
-- Partitions of the history tables are left out: their parent carries the comments.
-- Each query lists what has no comment, so each must return no rows.
SELECT c.relname, a.attname
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND NOT c.relispartition AND col_description(c.oid, a.attnum) IS NULL
 ORDER BY 1, 2;
SELECT c.relname
  FROM pg_class c
 WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND NOT c.relispartition AND obj_description(c.oid, 'pg_class') IS NULL
 ORDER BY 1;
SELECT p.oid::regprocedure AS function
  FROM pg_proc p
 WHERE p.pronamespace = 'bpf_stats'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL
 ORDER BY 1;
-- The overlays say they are "of which".
SELECT attname, col_description('bpf_stats.query_stats'::regclass, attnum) LIKE 'Of which, never add to the partition:%' AS overlay
  FROM pg_attribute
 WHERE attrelid = 'bpf_stats.query_stats'::regclass AND attname IN ('reclaim_ms', 'compaction_stall_ms', 'writeback_throttle_ms')
 ORDER BY 1;
-- hist_quantile's comment gives the signature the function has.
SELECT 'bpf_stats.hist_quantile(bigint[],double precision,double precision)'::regprocedure IS NOT NULL AS exists,
       obj_description('bpf_stats.hist_quantile(bigint[],double precision,double precision)'::regprocedure, 'pg_proc')
         LIKE 'hist_quantile(counts bigint[], q double precision, max_ms double precision) -> double precision:%' AS documented;
