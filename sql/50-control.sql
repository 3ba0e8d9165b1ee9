-- The control plane's SQL API (re-applied when sql/ changed). Both functions run as their owner
-- (the sidecar's role) with a fixed search_path; EXECUTE is granted to bpf_stats_admin only
-- (sql/99-grants.sql) and each checks membership again, so an accidental GRANT to PUBLIC
-- still lets nobody else in. The NOTIFY is a doorbell: the sidecar reads the rows.

-- The membership check both functions make: session_user, so SECURITY DEFINER does not hide
-- who is calling.
CREATE OR REPLACE FUNCTION bpf_stats.require_admin()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF NOT pg_has_role(session_user, 'bpf_stats_admin', 'MEMBER') THEN
    RAISE EXCEPTION 'permission denied: % is not a member of bpf_stats_admin', session_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
END
$fn$;

-- Asks the sidecar to attach probe sets for a while; returns the request id to watch in
-- bpf_stats.collections (LISTEN bpf_stats_status for a hint that it changed: any role can NOTIFY
-- that channel, so read the row). 'default' means the always-on sets.
-- duration NULL: until bpf_stats.stop(id), at most 24 hours. node: which node's collector
-- (several may write into one database with `run --sink`); NULL: the one collector running
-- here, an error when several are. A standby's collector listens on its sink: call this there.
-- (Before the node argument it had two: that signature is replaced, not overloaded.)
DROP FUNCTION IF EXISTS bpf_stats.collect(text[], interval);
CREATE OR REPLACE FUNCTION bpf_stats.collect(probes text[] DEFAULT '{default}', duration interval DEFAULT NULL, node text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  request_id bigint;
  target text := collect.node;
  running text[];
BEGIN
  PERFORM bpf_stats.require_admin();
  IF target IS NULL THEN
    -- Collectors that flushed lately and did not stop. A sink's node role writes its own health
    -- rows: each is bounded here too (not ahead of now, an interval of at most a day; the
    -- table's CHECKs say the same), so that no row counts as running for longer than a collector
    -- that stopped flushing would.
    SELECT array_agg(DISTINCT h.node ORDER BY h.node) INTO running
      FROM bpf_stats.health h
     WHERE h.stopped_at IS NULL
       AND h.updated_at <= now() + interval '1 minute'
       AND h.updated_at > now() - make_interval(secs => greatest(60, 3 * least(h.interval_ms, 86400000) / 1000));
    IF cardinality(running) > 1 THEN
      RAISE EXCEPTION '%', format('collectors of several nodes write into this database (%s): name one, e.g. bpf_stats.collect(%L, node => %L)',
                                  array_to_string(running, ', '), probes, running[1])
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A sink's node roles take only the requests made for their node: one made for no node would
    -- wait for a collector of the owner's own that may never run.
    IF running IS NULL AND EXISTS (SELECT 1 FROM bpf_stats.nodes) THEN
      RAISE EXCEPTION '%', format('no collector writes into this database now, and its nodes take only requests made for them: name one, e.g. bpf_stats.collect(%L, node => %L)',
                                  probes, (SELECT min(n.node) FROM bpf_stats.nodes n))
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    target := running[1];
  END IF;
  IF probes IS NULL OR cardinality(probes) = 0 OR cardinality(probes) > 32 OR array_position(probes, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'probes must name 1 to 32 probe sets, e.g. ''{query}'' or ''{default}'''
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(probes) p WHERE length(p) NOT BETWEEN 1 AND 63) THEN
    RAISE EXCEPTION 'probe set names are 1 to 63 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF duration IS NOT NULL AND (duration <= interval '0' OR duration > interval '24 hours') THEN
    RAISE EXCEPTION 'duration % is out of range: more than 0 and at most 24 hours (NULL: until bpf_stats.stop)', duration
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO bpf_stats.collections (requested_by, probes, duration, node)
  VALUES (session_user, probes, duration, target)
  RETURNING id INTO request_id;
  PERFORM pg_notify('bpf_stats_control', request_id::text);
  RETURN request_id;
END
$fn$;

-- Ends a request: a pending one never starts, a running one is detached by the sidecar (a set
-- stays attached while another running request wants it). Returns false when it had ended.
-- The row lock waits at most 5 s (a sink's node role may hold its own requests' rows).
CREATE OR REPLACE FUNCTION bpf_stats.stop(id bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fn$
DECLARE
  found_status text;
BEGIN
  PERFORM bpf_stats.require_admin();
  SELECT c.status INTO found_status FROM bpf_stats.collections c WHERE c.id = stop.id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no collection request %', stop.id USING ERRCODE = 'no_data_found';
  END IF;
  IF found_status NOT IN ('pending', 'running') THEN
    RETURN false;
  END IF;
  UPDATE bpf_stats.collections c SET status = 'stopped', finished_at = now() WHERE c.id = stop.id;
  PERFORM pg_notify('bpf_stats_control', stop.id::text);
  RETURN true;
END
$fn$;
