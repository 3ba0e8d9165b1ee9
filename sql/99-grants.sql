-- Privileges on everything in bpf_stats, re-applied last (when sql/ changed, a migration ran or
-- another role runs the collector) so that tables and views other files create are covered too. PUBLIC gets nothing; pg_monitor members read
-- everything; bpf_stats_admin members may request collections (bpf_stats.collect/stop).
REVOKE ALL ON SCHEMA bpf_stats FROM PUBLIC;
GRANT USAGE ON SCHEMA bpf_stats TO pg_monitor, bpf_stats_admin;

REVOKE ALL ON ALL TABLES IN SCHEMA bpf_stats FROM PUBLIC;
GRANT SELECT ON ALL TABLES IN SCHEMA bpf_stats TO pg_monitor;
-- Admins watch the requests they make.
GRANT SELECT ON bpf_stats.collections TO bpf_stats_admin;
-- Objects the sidecar's role creates later (before the next start re-applies this file).
ALTER DEFAULT PRIVILEGES IN SCHEMA bpf_stats GRANT SELECT ON TABLES TO pg_monitor;

REVOKE ALL ON FUNCTION bpf_stats.collect(text[], interval, text), bpf_stats.stop(bigint), bpf_stats.require_admin() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bpf_stats.collect(text[], interval, text), bpf_stats.stop(bigint) TO bpf_stats_admin;
