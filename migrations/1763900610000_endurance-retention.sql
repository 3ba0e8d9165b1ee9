-- Up Migration

-- Why a collector stopped: 'stopped' (a clean stop), the error that ended it, or, written by
-- its successor, that it died without a final flush (killed, crashed). NULL while it runs.
ALTER TABLE bpf_stats.health ADD COLUMN stop_reason text;

-- Retention deletes rows of exited backends by exited_at (src/health/row-retention.ts); a
-- server with a million connections a day must not scan the table for them.
CREATE INDEX backend_stats_exited_at ON bpf_stats.backend_stats (exited_at) WHERE exited_at IS NOT NULL;

-- Down Migration

DROP INDEX bpf_stats.backend_stats_exited_at;
ALTER TABLE bpf_stats.health DROP COLUMN stop_reason;
