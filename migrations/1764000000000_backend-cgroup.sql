-- Up Migration

-- The memory cgroup each process was born in (first seen in): a container's, in a pod or on a
-- host running several. Nullable: unknown for rows written before, or when the hierarchy is not
-- mounted where the collector runs.
ALTER TABLE bpf_stats.backend_stats ADD COLUMN cgroup text;

-- Down Migration

ALTER TABLE bpf_stats.backend_stats DROP COLUMN cgroup;
