-- Nodes of a sink kept apart (migrations/1764400000000_sink-node-roles.sql). Re-applied when
-- sql/ changed or a migration ran, so tables added later are covered too.
--
-- Why row-level security with a login role per node, rather than an ingestion function: a
-- flush is ONE statement of data-modifying CTEs over every table (src/flush/flush-writer.ts);
-- a function taking the rows would need a second encoding of every part and would cost every
-- collector, also the single-node one, an extra layer. With row-level security the statements
-- stay what they are, a node's identity is its login role (which it cannot change), and the
-- schema's owner (a collector writing into its own server, no --sink) bypasses the policies:
-- the default path plans and runs exactly as before.
--
-- A node role sees and writes only rows whose node is the one bpf_stats.nodes registers for
-- it (reads included: node A cannot read node B's texts), may read and move on only the
-- collection requests made for its node (not those made for no node: a node role could rewrite
-- their status, and a forged bpf_stats_status message about one then checked out against the
-- row), and may insert and delete none: requests come from bpf_stats.collect(), which runs as
-- the owner, and finished ones are deleted by the owner's row retention.

-- The tables of node rows: every table of bpf_stats with a node column, but collections (its
-- own policies below) and partitions (reached through their parent only: a node role has no
-- privilege on a partition, and the parent's policies apply to every row routed through it).
CREATE OR REPLACE FUNCTION bpf_stats.node_tables()
RETURNS SETOF regclass LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT c.oid::regclass FROM pg_catalog.pg_class c
   WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
     AND c.relname NOT IN ('collections', 'nodes')
     AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'node' AND NOT a.attisdropped)
   ORDER BY c.relname
$$;

-- The node a role writes as (NULL: none). Called with the caller's current_user from the
-- policies, so that no reader (pg_monitor, bpf_stats_admin) needs a privilege on bpf_stats.nodes.
CREATE OR REPLACE FUNCTION bpf_stats.node_of(role name)
RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT n.node FROM bpf_stats.nodes n WHERE n.role = node_of.role
$$;

DO $policies$
DECLARE
  t regclass;
  mine constant text := '(SELECT bpf_stats.node_of(current_user))';
BEGIN
  FOR t IN SELECT * FROM bpf_stats.node_tables() LOOP
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
    -- The subquery is an InitPlan: the node is looked up once per statement, not per row.
    EXECUTE format('DROP POLICY IF EXISTS node_rows ON %s', t);
    EXECUTE format('CREATE POLICY node_rows ON %s USING (node = %s) WITH CHECK (node = %s)', t, mine, mine);
    -- Permissive policies are OR'd: a node role that is also a member of pg_monitor would read
    -- every node's rows through this one, so it reads for roles that are no node only.
    EXECUTE format('DROP POLICY IF EXISTS readers ON %s', t);
    EXECUTE format('CREATE POLICY readers ON %s FOR SELECT TO pg_monitor USING (%s IS NULL)', t, mine);
  END LOOP;
  ALTER TABLE bpf_stats.collections ENABLE ROW LEVEL SECURITY;
  DROP POLICY IF EXISTS node_requests ON bpf_stats.collections;
  EXECUTE format('CREATE POLICY node_requests ON bpf_stats.collections FOR SELECT USING (node = %s)', mine);
  DROP POLICY IF EXISTS node_claims ON bpf_stats.collections;
  EXECUTE format('CREATE POLICY node_claims ON bpf_stats.collections FOR UPDATE USING (node = %s) WITH CHECK (node = %s)', mine, mine);
  -- (Node roles once deleted their finished requests; they hold no DELETE now.)
  DROP POLICY IF EXISTS node_forgets ON bpf_stats.collections;
  DROP POLICY IF EXISTS readers ON bpf_stats.collections;
  EXECUTE format('CREATE POLICY readers ON bpf_stats.collections FOR SELECT TO pg_monitor, bpf_stats_admin USING (%s IS NULL)', mine);
END
$policies$;

-- History partitions for a node role, which may not create or drop tables: partitions of the
-- width in use (one day when none is) are created, and nothing is ever dropped. A node cannot
-- choose either: a retention of its own would drop every node's history (the owner's 30 days
-- cut to the node's 7), a tiny width fill the catalog. Old partitions are dropped by the
-- owner's collector, with the owner's retention (or by the owner calling maintain_history).
--
-- It runs in the node role's transaction, which that role may keep open: a lock taken here
-- would be held until it ends (SHARE UPDATE EXCLUSIVE on every history parent stopped the
-- owner's maintain_history, then every node's flushes once the partitions made ahead ran out).
-- So it takes none while partitions cover the next width from now, which the owner's upkeep
-- (two widths ahead, every quarter width) always leaves: it reads the catalog and returns. Only
-- when nobody made them does it make them, waiting at most 100 ms for the lock.
CREATE OR REPLACE FUNCTION bpf_stats.node_maintain_history()
RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '100ms'
AS $fn$
DECLARE
  width interval;
  now_s bigint := floor(extract(epoch FROM clock_timestamp()))::bigint;
  ahead bigint;
BEGIN
  SELECT make_interval(secs => m[2]::bigint - m[1]::bigint) INTO width
    FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
         regexp_match(c.relname, '_(\d+)_(\d+)$') AS m
   WHERE i.inhparent = 'bpf_stats.query_stats_history'::regclass
     AND m[1]::bigint <= now_s AND now_s < m[2]::bigint
   LIMIT 1;
  width := least(greatest(coalesce(width, interval '1 day'), interval '1 hour'), interval '1 day');
  ahead := now_s + extract(epoch FROM width)::bigint;
  IF NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class p, unnest(ARRAY[now_s, ahead]) AS t(s)
     WHERE p.relnamespace = 'bpf_stats'::regnamespace AND p.relkind = 'p' AND p.relname LIKE '%\_history'
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
                              regexp_match(c.relname, '_(\d+)_(\d+)$') AS m
                        WHERE i.inhparent = p.oid AND m[1]::bigint <= t.s AND t.s < m[2]::bigint)) THEN
    created := 0;
    dropped := 0;
    RETURN NEXT;
    RETURN;
  END IF;
  -- Retention NULL: only the missing partitions are made.
  RETURN QUERY SELECT h.created, h.dropped FROM bpf_stats.maintain_history(NULL, width) h;
END
$fn$;

-- A node role's deletes, which it may not run itself (no DELETE: see grant_node): its row
-- retention (rows of its exited backends, its query keys past the bounds), the collector's own
-- backends retracted by a flush, its host's capabilities replaced at a start. Rows of table
-- `tbl` at the tuple ids `rows` (the caller reads them, under its policies), and of those only
-- the ones of the session's node: the node is the one bpf_stats.nodes registers for
-- session_user, the login role, which a node role cannot change (SET ROLE changes current_user
-- only, and the function runs as the owner, who bypasses the policies, so it filters by node
-- itself); never an argument or the session's bpf_stats.node, which any role can set. Only the
-- tables of node rows that are not partitioned (history rows go with their partitions) and not
-- health (the owner's retention deletes stopped collectors' rows). The deletes take ROW
-- EXCLUSIVE, as the node's own inserts do, and row locks on the node's own rows only.
-- Returns the number of rows deleted.
CREATE OR REPLACE FUNCTION bpf_stats.node_delete(tbl regclass, rows tid[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  me constant text := bpf_stats.node_of(session_user);
  n bigint;
BEGIN
  IF me IS NULL THEN
    RAISE EXCEPTION 'role % is not registered as a node: bpf_stats.node_delete deletes only a node''s own rows', quote_ident(session_user)
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM bpf_stats.node_tables() AS t(rel) JOIN pg_catalog.pg_class c ON c.oid = t.rel
                  WHERE t.rel = node_delete.tbl AND c.relkind = 'r' AND t.rel <> 'bpf_stats.health'::regclass) THEN
    RAISE EXCEPTION 'bpf_stats.node_delete does not delete from %: only from the tables of node rows that are not partitioned, but health', tbl
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF rows IS NULL OR cardinality(rows) = 0 THEN
    RETURN 0;
  END IF;
  EXECUTE format('DELETE FROM %s t WHERE t.ctid = ANY ($1) AND t.node = $2', tbl) USING rows, me;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- What a node role may do: write its rows (policies above), move its requests on, have history
-- partitions made and delete its own rows through node_delete. LOCK TABLE in any mode above ROW
-- EXCLUSIVE needs UPDATE, DELETE or TRUNCATE (and on 17+ MAINTAIN) on the whole table (PostgreSQL
-- 14 and 15: SELECT allows ACCESS SHARE, INSERT ROW EXCLUSIVE, nothing less than those allows any
-- other mode; 16+: SELECT allows ACCESS SHARE, INSERT ROW SHARE and ROW EXCLUSIVE), and a
-- column-level UPDATE does not count. So a node role holds none of those on any table:
-- - The history tables (the partitioned ones) take SELECT and INSERT only: an open transaction
--   holding SHARE UPDATE EXCLUSIVE there stopped maintain_history on every pass (no partitions,
--   every node's flushes failing).
-- - Every other table of node rows (the cumulative ones, health) takes SELECT, INSERT and UPDATE
--   of its columns (the upserts; ON CONFLICT DO UPDATE needs no more), no DELETE: an ACCESS
--   EXCLUSIVE lock a node role took on query_stats and held made every node's flushes fail on
--   their lock timeout. Its deletes go through node_delete; stopped health rows are deleted by
--   the owner's row retention.
-- - collections (every collect() writes it, readers read it): SELECT and UPDATE of the columns a
--   collector moves a request on with; finished requests are deleted by the owner's retention.
-- Revoked first: a role registered by an older version holds more (this runs again for every
-- registered node when sql/ is applied; revoking a table's privilege revokes its column
-- privileges too).
CREATE OR REPLACE FUNCTION bpf_stats.grant_node(role name)
RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  t regclass;
BEGIN
  EXECUTE format('GRANT USAGE ON SCHEMA bpf_stats TO %I', role);
  FOR t IN SELECT * FROM bpf_stats.node_tables() LOOP
    EXECUTE format('REVOKE ALL ON %s FROM %I', t, role);
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t) = 'p' THEN
      EXECUTE format('GRANT SELECT, INSERT ON %s TO %I', t, role);
    ELSE
      EXECUTE format('GRANT SELECT, INSERT, UPDATE (%s) ON %s TO %I',
                     (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
                       WHERE a.attrelid = t AND a.attnum > 0 AND NOT a.attisdropped), t, role);
    END IF;
  END LOOP;
  EXECUTE format('REVOKE ALL ON bpf_stats.collections FROM %I', role);
  EXECUTE format('GRANT SELECT ON bpf_stats.collections TO %I', role);
  EXECUTE format('GRANT UPDATE (status, started_at, finished_at, error, node) ON bpf_stats.collections TO %I', role);
  EXECUTE format('GRANT EXECUTE ON FUNCTION bpf_stats.node_maintain_history() TO %I', role);
  EXECUTE format('GRANT EXECUTE ON FUNCTION bpf_stats.node_delete(regclass, tid[]) TO %I', role);
END
$fn$;

-- Registers `node` as written by login role `role` (run by the schema's owner; `pg-bpf-stats
-- sink-node add`). The role must exist and must not bypass row-level security.
CREATE OR REPLACE FUNCTION bpf_stats.add_node(node text, role name)
RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  r record;
BEGIN
  SELECT rolsuper, rolbypassrls INTO r FROM pg_catalog.pg_roles WHERE rolname = add_node.role;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'role % does not exist: create it first, e.g. CREATE ROLE % LOGIN PASSWORD ''...''', quote_ident(add_node.role), quote_ident(add_node.role)
      USING ERRCODE = 'undefined_object';
  END IF;
  IF r.rolsuper OR r.rolbypassrls OR pg_has_role(add_node.role, (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'bpf_stats'), 'MEMBER') THEN
    RAISE EXCEPTION 'role % is a superuser, bypasses row-level security or owns bpf_stats: a node needs a role of its own that does none of these', quote_ident(add_node.role)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Policies keep a node role to its node's rows; a reader's or an admin's role would reach
  -- every node's requests (collect() for any node) and whatever else those roles are granted.
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles g
              WHERE g.rolname IN ('pg_monitor', 'bpf_stats_admin') AND pg_has_role(add_node.role, g.oid, 'MEMBER')) THEN
    RAISE EXCEPTION 'role % is a member of pg_monitor or bpf_stats_admin: a node''s role must be neither (REVOKE pg_monitor, bpf_stats_admin FROM %)', quote_ident(add_node.role), quote_ident(add_node.role)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- pg_maintain (17+) holds MAINTAIN on every table, which allows LOCK in any mode: such a role
  -- could hold off every node's flushes.
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles g WHERE g.rolname = 'pg_maintain' AND pg_has_role(add_node.role, g.oid, 'MEMBER')) THEN
    RAISE EXCEPTION 'role % is a member of pg_maintain, which may lock every table against the other nodes: a node''s role must not be (REVOKE pg_maintain FROM %)', quote_ident(add_node.role), quote_ident(add_node.role)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF add_node.node !~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$' THEN
    RAISE EXCEPTION 'node %: expected 1 to 63 characters, letters, digits and . _ : @ - (starting with a letter or digit)', quote_literal(add_node.node)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM bpf_stats.nodes n WHERE n.role = add_node.role AND n.node <> add_node.node) THEN
    RAISE EXCEPTION 'role % is registered for node % already: one role per node', quote_ident(add_node.role),
      (SELECT n.node FROM bpf_stats.nodes n WHERE n.role = add_node.role) USING ERRCODE = 'unique_violation';
  END IF;
  IF EXISTS (SELECT 1 FROM bpf_stats.nodes n WHERE n.node = add_node.node AND n.role <> add_node.role) THEN
    RAISE EXCEPTION 'node % is registered for role % already: remove it first (bpf_stats.remove_node)', add_node.node,
      (SELECT quote_ident(n.role) FROM bpf_stats.nodes n WHERE n.node = add_node.node) USING ERRCODE = 'unique_violation';
  END IF;
  -- Adding a node again re-grants (a table added since).
  INSERT INTO bpf_stats.nodes (node, role) VALUES (add_node.node, add_node.role) ON CONFLICT DO NOTHING;
  PERFORM bpf_stats.grant_node(add_node.role);
END
$fn$;

-- Unregisters a node: its role loses every privilege here (its rows stay, for the owner to keep
-- or delete). Returns false when no such node was registered.
CREATE OR REPLACE FUNCTION bpf_stats.remove_node(node text)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  gone name;
  t regclass;
BEGIN
  DELETE FROM bpf_stats.nodes n WHERE n.node = remove_node.node RETURNING n.role INTO gone;
  IF gone IS NULL THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = gone) THEN
    RETURN true;
  END IF;
  FOR t IN SELECT * FROM bpf_stats.node_tables() LOOP
    EXECUTE format('REVOKE ALL ON %s FROM %I', t, gone);
  END LOOP;
  EXECUTE format('REVOKE ALL ON bpf_stats.nodes, bpf_stats.collections FROM %I', gone);
  EXECUTE format('REVOKE ALL ON FUNCTION bpf_stats.node_maintain_history() FROM %I', gone);
  EXECUTE format('REVOKE ALL ON FUNCTION bpf_stats.node_delete(regclass, tid[]) FROM %I', gone);
  EXECUTE format('REVOKE USAGE ON SCHEMA bpf_stats FROM %I', gone);
  RETURN true;
END
$fn$;

COMMENT ON TABLE bpf_stats.nodes IS
  'The nodes of a sink that write under login roles of their own (run --sink as that role): row-level security lets each role see and write only its node''s rows, and take only requests made for its node (or for none). Registered by the schema''s owner with bpf_stats.add_node (pg-bpf-stats sink-node add). The owner''s own collector is not listed: owners bypass row-level security.';
COMMENT ON COLUMN bpf_stats.nodes.node IS 'The node''s name, as its collector''s --node gives it and every row''s node column carries it.';
COMMENT ON COLUMN bpf_stats.nodes.role IS 'The login role the node''s collector connects to the sink as; one role per node.';
COMMENT ON COLUMN bpf_stats.nodes.added_at IS 'When the node was registered.';
COMMENT ON FUNCTION bpf_stats.node_tables() IS 'Internal: the tables of node rows that row-level security keeps apart per node (all with a node column but collections and nodes; partitions through their parent).';
COMMENT ON FUNCTION bpf_stats.node_of(name) IS 'The node a role is registered for in bpf_stats.nodes (NULL: none); the row-level security policies call it with current_user.';
COMMENT ON FUNCTION bpf_stats.node_maintain_history() IS 'History partitions for a node role, which may not create or drop tables: partitions of the width in use (1 day when none, at least 1 hour) are created when the next width from now is not covered (then waiting at most 100 ms for the lock; otherwise it takes no lock); none is dropped (the owner''s collector drops them, with the owner''s retention).';
COMMENT ON FUNCTION bpf_stats.node_delete(regclass, tid[]) IS 'node_delete(tbl, rows) -> rows deleted: deletes the rows of table tbl at tuple ids rows that belong to the node registered for the session''s login role, and no others; only the tables of node rows that are not partitioned, but health. How a node role (which holds no DELETE, so that it can lock no table every node writes) runs its row retention, retracts its collector''s own backends and replaces its host''s capabilities.';
COMMENT ON FUNCTION bpf_stats.grant_node(name) IS 'Internal: the privileges of a node role (its rows under row-level security; SELECT and INSERT only on the history tables, SELECT, INSERT and UPDATE of columns on the other tables of node rows and UPDATE of columns on collections, never DELETE, TRUNCATE or a table-level UPDATE, so that it can lock none of them above ROW EXCLUSIVE; its requests; history partitions; its deletes through node_delete); re-applied for every registered node when sql/ is.';
COMMENT ON FUNCTION bpf_stats.add_node(text, name) IS 'add_node(node, role): lets login role `role` write node `node`''s rows here, and only those; run by the schema''s owner (pg-bpf-stats sink-node add). Refuses roles that are superusers, bypass row-level security, own bpf_stats or are members of pg_monitor, bpf_stats_admin or (17+) pg_maintain.';
COMMENT ON FUNCTION bpf_stats.remove_node(text) IS 'remove_node(node): takes every privilege here from the node''s role; its rows stay. False when the node was not registered.';

-- Tables added since a node was registered are granted to it now.
SELECT bpf_stats.grant_node(n.role) FROM bpf_stats.nodes n JOIN pg_catalog.pg_roles r ON r.rolname = n.role;

REVOKE ALL ON FUNCTION bpf_stats.node_tables(), bpf_stats.node_maintain_history(), bpf_stats.node_delete(regclass, tid[]), bpf_stats.grant_node(name),
  bpf_stats.add_node(text, name), bpf_stats.remove_node(text) FROM PUBLIC;
