-- Views got a node column first in their column list (migrations/1763990000000_sink-node.sql);
-- CREATE OR REPLACE VIEW can only add columns at the end, so views made before it are dropped
-- here, once, and re-created by the files after this one in the same transaction.
DO $drop$
DECLARE
  v record;
BEGIN
  FOR v IN
    SELECT c.relname FROM pg_class c
     WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind = 'v'
       AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'node' AND NOT a.attisdropped)
  LOOP
    -- CASCADE reaches only our own views that use it (query_locks uses query_lock_detail).
    EXECUTE format('DROP VIEW IF EXISTS bpf_stats.%I CASCADE', v.relname);
  END LOOP;
END
$drop$;

-- The nodes whose collector measures this very server: it holds a session here (its control
-- connection, named as src/postmaster/server-lock.ts names it). Views that join live
-- pg_stat_activity show only their rows. On a standby, whose bpf_stats is its primary's, that
-- is the standby's own node. Only sessions of a role trusted with bpf_stats count (the schema's
-- owner, a superuser, or a role with the owner's privileges; as src/postmaster/server-lock.ts
-- counts collectors): a node role writes a health row of its own, and with a session named
-- after it its forged backend_stats were joined to this server's real backends.
CREATE OR REPLACE FUNCTION bpf_stats.local_nodes()
RETURNS SETOF text LANGUAGE sql STABLE
-- Pinned: every reader of the activity view runs this with their own path; format() and = must be
-- the catalog's, whatever that path holds (a pinned function is not inlined; it runs once per query).
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT DISTINCT h.node FROM bpf_stats.health h
   WHERE EXISTS (SELECT 1 FROM pg_stat_activity a
                  WHERE a.application_name = format('pg-bpf-stats (pid %s on %s)', h.pid, h.host)
                    AND coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.oid = a.usesysid)
                                 OR pg_has_role(a.usesysid, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'bpf_stats'), 'USAGE'),
                                 false))
$$;
