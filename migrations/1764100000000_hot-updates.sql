-- Up Migration

-- query_stats and backend_stats rows are rewritten at every flush that changes them, and no
-- indexed column changes: with room left in each page the new version goes on the same page
-- (a HOT update: no index entry, the old version pruned in place). Full pages (fillfactor 100)
-- sent every update to another page with a new index entry. Measured with bench/flush-scaling.ts:
-- an upsert of 10,000 changed rows took 190 ms at the server instead of 300 ms.
-- Pages written from now on keep the room; a VACUUM FULL applies it to older ones.
ALTER TABLE bpf_stats.query_stats SET (fillfactor = 50);
ALTER TABLE bpf_stats.backend_stats SET (fillfactor = 50);

-- Down Migration

ALTER TABLE bpf_stats.query_stats RESET (fillfactor);
ALTER TABLE bpf_stats.backend_stats RESET (fillfactor);
