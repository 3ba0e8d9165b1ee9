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

-- Retention for the history tables: drops every partition whose rows are all older than
-- `retention`, and creates partitions `width` wide from now to two widths ahead (aligned to
-- multiples of `width` since the Unix epoch; named <table>_<from>_<to> in epoch seconds).
-- Dropping a partition is O(1) and leaves no dead rows to vacuum; rows live between
-- `retention` and `retention + width`. After a change of width, empty partitions made ahead
-- are replaced; the current one keeps its old width until it expires. Several sidecars may
-- call it: an advisory lock serialises them, and the shortest retention wins.
CREATE OR REPLACE FUNCTION bpf_stats.maintain_history(retention interval, width interval)
RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql AS $fn$
DECLARE
  w bigint := extract(epoch FROM width)::bigint;
  now_s bigint := floor(extract(epoch FROM clock_timestamp()))::bigint;
  keep_from bigint := floor(extract(epoch FROM clock_timestamp() - retention))::bigint;
  parent text;
  part record;
  los bigint[];
  his bigint[];
  cursor_s bigint;
  hi bigint;
  empty boolean;
BEGIN
  IF w < 1 THEN
    RAISE EXCEPTION 'history partition width must be at least 1 second, not %', width;
  END IF;
  created := 0;
  dropped := 0;
  PERFORM pg_advisory_xact_lock(hashtext('bpf_stats.history'));
  FOREACH parent IN ARRAY ARRAY['query_stats_history', 'backend_stats_history'] LOOP
    los := '{}';
    his := '{}';
    FOR part IN
      SELECT c.relname, m[1]::bigint AS lo, m[2]::bigint AS hi
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
             regexp_match(c.relname, '_(\d+)_(\d+)$') AS m
       WHERE i.inhparent = format('bpf_stats.%I', parent)::regclass AND m IS NOT NULL
    LOOP
      IF part.hi <= keep_from THEN
        EXECUTE format('DROP TABLE bpf_stats.%I', part.relname);
        dropped := dropped + 1;
        CONTINUE;
      END IF;
      IF part.lo > now_s AND part.hi - part.lo <> w THEN
        -- Made ahead under another width (the retention changed): replace it while it is empty.
        EXECUTE format('SELECT NOT EXISTS (SELECT FROM bpf_stats.%I)', part.relname) INTO empty;
        IF empty THEN
          EXECUTE format('DROP TABLE bpf_stats.%I', part.relname);
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
      EXECUTE format('CREATE TABLE bpf_stats.%I PARTITION OF bpf_stats.%I FOR VALUES FROM (%L) TO (%L)',
                     parent || '_' || cursor_s || '_' || hi, parent, to_timestamp(cursor_s), to_timestamp(hi));
      created := created + 1;
      los := los || cursor_s;
      his := his || hi;
      cursor_s := hi;
    END LOOP;
  END LOOP;
  RETURN NEXT;
END
$fn$;
