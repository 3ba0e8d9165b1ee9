-- Up Migration

-- As 1764100000000_hot-updates did for query_stats and backend_stats: query_histograms,
-- query_lock_waits and query_lwlock_waits rows are rewritten by every flush that changes them,
-- and no indexed column changes. Full pages sent nearly every histogram update to another page
-- with a new index entry (bench/flush-scaling.ts with the latency set: 21,089 of 187,901
-- updates HOT, 68 MB of heap for 8,000 live rows); room left in each page keeps the new version
-- on its page. Pages written from now on keep the room; a VACUUM FULL applies it to older ones.
ALTER TABLE bpf_stats.query_histograms SET (fillfactor = 50);
ALTER TABLE bpf_stats.query_lock_waits SET (fillfactor = 50);
ALTER TABLE bpf_stats.query_lwlock_waits SET (fillfactor = 50);

-- Down Migration

ALTER TABLE bpf_stats.query_histograms RESET (fillfactor);
ALTER TABLE bpf_stats.query_lock_waits RESET (fillfactor);
ALTER TABLE bpf_stats.query_lwlock_waits RESET (fillfactor);
