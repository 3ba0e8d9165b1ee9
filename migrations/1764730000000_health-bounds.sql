-- Up Migration

-- A sink's node role writes its own health rows (run --sink), and bpf_stats.collect() picks the
-- node to ask from them: a row that says it was updated at 'infinity' (or with an interval of
-- 1e300 ms) counted as a live collector for good, and collect() without a node failed for good
-- ("collectors of several nodes"); a 100 kB version was stored as it came. Rows are now bounded:
-- timestamps finite, updated_at not ahead of the server's clock (it is always now() of the
-- writing transaction), the flush interval at most a day (the collector writes least(interval,
-- 1 day)), texts and JSON of the sizes a collector writes. Rows that do not fit were forged: they
-- go (health rows are rewritten by every collector's next flush).
DELETE FROM bpf_stats.health
 WHERE NOT (length(host) <= 255 AND length(version) <= 200
            AND cardinality(probe_sets) <= 64 AND octet_length(probe_sets::text) <= 4096
            AND isfinite(started_at) AND isfinite(updated_at) AND updated_at <= now() + interval '1 minute'
            AND (last_flush_at IS NULL OR isfinite(last_flush_at)) AND (last_error_at IS NULL OR isfinite(last_error_at))
            AND (stopped_at IS NULL OR isfinite(stopped_at))
            AND interval_ms > 0 AND interval_ms <= 86400000
            AND (last_error IS NULL OR length(last_error) <= 4000) AND (stop_reason IS NULL OR length(stop_reason) <= 4000)
            AND octet_length(dropped::text) <= 65536 AND octet_length(map_fill::text) <= 65536);

ALTER TABLE bpf_stats.health
  ADD CONSTRAINT health_texts_bound CHECK (length(host) <= 255 AND length(version) <= 200
    AND cardinality(probe_sets) <= 64 AND octet_length(probe_sets::text) <= 4096
    AND (last_error IS NULL OR length(last_error) <= 4000) AND (stop_reason IS NULL OR length(stop_reason) <= 4000)
    AND octet_length(dropped::text) <= 65536 AND octet_length(map_fill::text) <= 65536),
  ADD CONSTRAINT health_times_finite CHECK (isfinite(started_at) AND isfinite(updated_at)
    AND (last_flush_at IS NULL OR isfinite(last_flush_at)) AND (last_error_at IS NULL OR isfinite(last_error_at))
    AND (stopped_at IS NULL OR isfinite(stopped_at))),
  -- Checked when a row is written, against that transaction's clock: a row cannot say it is
  -- fresher than it is by more than a minute. (now() in a CHECK: it only ever grows, so a row that
  -- passed it passes it again at a restore.)
  ADD CONSTRAINT health_updated_at_past CHECK (updated_at <= now() + interval '1 minute'),
  ADD CONSTRAINT health_interval_bound CHECK (interval_ms > 0 AND interval_ms <= 86400000);

-- Down Migration

ALTER TABLE bpf_stats.health DROP CONSTRAINT health_interval_bound, DROP CONSTRAINT health_updated_at_past,
  DROP CONSTRAINT health_times_finite, DROP CONSTRAINT health_texts_bound;
