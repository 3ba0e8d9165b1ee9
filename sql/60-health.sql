-- Health and history support (re-applied when sql/ changed or a migration ran).

-- The history tables keep every metric column of the cumulative tables: a column another
-- migration adds to query_stats / backend_stats is added here too (nullable, no rewrite), so
-- the flush's history insert can never name a column the history table lacks.
DO $sync$
DECLARE
  col record;
BEGIN
  FOR col IN
    SELECT h.tbl, a.attname, format_type(a.atttypid, a.atttypmod) AS type
      FROM (VALUES ('query_stats', 'query_stats_history'), ('backend_stats', 'backend_stats_history')) AS h(src, tbl)
      JOIN pg_attribute a ON a.attrelid = format('bpf_stats.%I', h.src)::regclass AND a.attnum > 0 AND NOT a.attisdropped
     WHERE a.attname NOT IN ('stats_since', 'last_seen', 'exited_at', 'cgroup')
       AND NOT EXISTS (SELECT 1 FROM pg_attribute x
                        WHERE x.attrelid = format('bpf_stats.%I', h.tbl)::regclass
                          AND x.attname = a.attname AND x.attnum > 0 AND NOT x.attisdropped)
  LOOP
    EXECUTE format('ALTER TABLE bpf_stats.%I ADD COLUMN %I %s', col.tbl, col.attname, col.type);
  END LOOP;
END
$sync$;

-- Drops one history partition unless a reader holds it off for more than 100 ms (DROP needs ACCESS
-- EXCLUSIVE on the parent, and while it waits it queues the flushes' inserts behind it); returns
-- whether it did. Its own subtransaction: a lock timeout undoes only this drop.
CREATE OR REPLACE FUNCTION bpf_stats.drop_history_partition(relname text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  waited text := current_setting('lock_timeout');
BEGIN
  PERFORM set_config('lock_timeout', '100ms', true);
  EXECUTE format('DROP TABLE bpf_stats.%I', relname);
  PERFORM set_config('lock_timeout', waited, true);
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$fn$;

-- Retention for the history tables: drops every partition whose rows are all older than
-- `retention`, and creates partitions `width` wide from now to two widths ahead (aligned to
-- multiples of `width` since the Unix epoch; named <table>_<from>_<to> in epoch seconds).
-- Dropping a partition is O(1) and leaves no dead rows to vacuum; rows live between
-- `retention` and `retention + width`. After a change of width, empty partitions made ahead
-- are replaced; the current one keeps its old width until it expires.
--
-- No lock another role can hold may stop it from creating partitions (a flush would then fail:
-- "no partition of relation ... found for row"):
-- - Several sidecars are serialised by SHARE UPDATE EXCLUSIVE on the history tables, a lock only
--   their owner (or a role with UPDATE/DELETE/TRUNCATE on them, granted to nobody) can take, and
--   which readers (ACCESS SHARE, pg_monitor) and writers (ROW EXCLUSIVE) never conflict with. An
--   advisory lock here was taken by any role at will.
-- - A partition is created apart and attached (ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on
--   the parent); CREATE TABLE ... PARTITION OF and DROP need ACCESS EXCLUSIVE on the parent, which a
--   reader's open transaction holds off. Creation comes first; each drop waits at most 100 ms in a
--   subtransaction of its own and is retried at the next pass when a reader is in the way (rows are
--   kept a little longer, never lost), so a queued drop never holds up a flush for long.
-- No DEFAULT partition: attaching next to one needs ACCESS EXCLUSIVE on it, which any reader of
-- the whole table holds, so a reader could again stop partitions being made.
-- `retention` NULL drops nothing (neither expired partitions nor empty ones made ahead under
-- another width) and only fills the gaps: a sink node's pass (bpf_stats.node_maintain_history),
-- which must not impose a retention on the owner's history.
CREATE OR REPLACE FUNCTION bpf_stats.maintain_history(retention interval, width interval)
RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  w bigint := extract(epoch FROM width)::bigint;
  now_s bigint := floor(extract(epoch FROM clock_timestamp()))::bigint;
  keep_from bigint := floor(extract(epoch FROM clock_timestamp() - retention))::bigint;
  parents text[];
  parent text;
  part record;
  los bigint[];
  his bigint[];
  doomed text[];
  cursor_s bigint;
  hi bigint;
  name text;
  empty boolean;
BEGIN
  IF w < 1 THEN
    RAISE EXCEPTION 'history partition width must be at least 1 second, not %', width;
  END IF;
  created := 0;
  dropped := 0;
  -- Every history table: the partitioned tables of bpf_stats named *_history (only the schema's
  -- owner creates tables there), locked in one order so that two passes cannot deadlock.
  parents := ARRAY(SELECT c.relname::text FROM pg_class c
                    WHERE c.relnamespace = 'bpf_stats'::regnamespace AND c.relkind = 'p' AND c.relname LIKE '%\_history'
                    ORDER BY c.relname);
  EXECUTE format('LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE',
                 (SELECT string_agg(format('bpf_stats.%I', p), ', ' ORDER BY p) FROM unnest(parents) AS p));
  FOREACH parent IN ARRAY parents LOOP
    los := '{}';
    his := '{}';
    doomed := '{}';
    FOR part IN
      SELECT c.relname, m[1]::bigint AS lo, m[2]::bigint AS hi
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
             regexp_match(c.relname, '_(\d+)_(\d+)$') AS m
       WHERE i.inhparent = format('bpf_stats.%I', parent)::regclass AND m IS NOT NULL
       ORDER BY m[1]::bigint
    LOOP
      IF retention IS NOT NULL AND part.hi <= keep_from THEN
        doomed := doomed || part.relname::text;
        CONTINUE;
      END IF;
      IF retention IS NOT NULL AND part.lo > now_s AND part.hi - part.lo <> w THEN
        -- Made ahead under another width (the retention changed): replace it while it is empty.
        EXECUTE format('SELECT NOT EXISTS (SELECT FROM bpf_stats.%I)', part.relname) INTO empty;
        IF empty AND bpf_stats.drop_history_partition(part.relname) THEN
          CONTINUE;
        END IF;
      END IF;
      los := los || part.lo;
      his := his || part.hi;
    END LOOP;
    -- Cover [now, now + 2 widths) with partitions on multiples of the width, filling only the
    -- gaps between the partitions that exist.
    cursor_s := (now_s / w) * w;
    WHILE cursor_s < now_s + 2 * w LOOP
      SELECT max(h) INTO hi FROM unnest(los, his) AS r(l, h) WHERE l <= cursor_s AND cursor_s < h;
      IF hi IS NOT NULL THEN
        cursor_s := hi;
        CONTINUE;
      END IF;
      SELECT least((cursor_s / w + 1) * w, min(l)) INTO hi FROM unnest(los) AS r(l) WHERE l > cursor_s;
      name := parent || '_' || cursor_s || '_' || hi;
      -- The CHECK matches the bound, so ATTACH needs no scan; the parent's own CHECKs come along (ATTACH requires them).
      EXECUTE format('CREATE TABLE bpf_stats.%I (LIKE bpf_stats.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS, CHECK (ts >= %L AND ts < %L))',
                     name, parent, to_timestamp(cursor_s), to_timestamp(hi));
      EXECUTE format('ALTER TABLE bpf_stats.%I ATTACH PARTITION bpf_stats.%I FOR VALUES FROM (%L) TO (%L)',
                     parent, name, to_timestamp(cursor_s), to_timestamp(hi));
      created := created + 1;
      los := los || cursor_s;
      his := his || hi;
      cursor_s := hi;
    END LOOP;
    -- Oldest first; one drop held off means the parent is held (every drop needs it): the rest
    -- wait for the next pass instead of 100 ms each now.
    FOREACH name IN ARRAY doomed LOOP
      EXIT WHEN NOT bpf_stats.drop_history_partition(name);
      dropped := dropped + 1;
    END LOOP;
  END LOOP;
  RETURN NEXT;
END
$fn$;
