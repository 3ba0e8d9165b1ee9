-- Up Migration

-- Who may ask for collections. Roles are cluster-wide: a DBA may create it beforehand, so the
-- sidecar's own role needs CREATEROLE only when it does not exist yet.
DO $role$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bpf_stats_admin') THEN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
      RAISE EXCEPTION 'role bpf_stats_admin does not exist and % may not create it: run CREATE ROLE bpf_stats_admin NOLOGIN as a superuser first', current_user;
    END IF;
    CREATE ROLE bpf_stats_admin NOLOGIN;
  END IF;
END
$role$;

-- Collection requests: the authoritative state of the control plane. bpf_stats.collect() inserts
-- a row and rings the bpf_stats_control doorbell; the sidecar validates the row (it trusts
-- neither the row nor the NOTIFY payload), attaches the probe sets and moves the status on.
CREATE TABLE bpf_stats.collections (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  requested_by name        NOT NULL DEFAULT session_user,
  requested_at timestamptz NOT NULL DEFAULT now(),
  probes       text[]      NOT NULL,
  -- NULL: until bpf_stats.stop(id), at most the cap (24 hours).
  duration     interval,
  status       text        NOT NULL DEFAULT 'pending'
               CHECK (status IN ('pending', 'running', 'done', 'failed', 'rejected', 'stopped')),
  started_at   timestamptz,
  finished_at  timestamptz,
  error        text
);

-- The sidecar looks for open requests on every doorbell.
CREATE INDEX collections_open ON bpf_stats.collections (id) WHERE status IN ('pending', 'running');

-- Down Migration

DROP TABLE bpf_stats.collections;
