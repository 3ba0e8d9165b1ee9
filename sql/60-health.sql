-- Health and history support (re-applied on every start).

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
     WHERE a.attname NOT IN ('stats_since', 'last_seen', 'exited_at')
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
-- `retention` and `retention + width`. Several sidecars may call it: an advisory lock
-- serialises them, and the shortest retention wins.
CREATE OR REPLACE FUNCTION bpf_stats.maintain_history(retention interval, width interval)
RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql AS $fn$
DECLARE
  w bigint := extract(epoch FROM width)::bigint;
  now_s bigint := floor(extract(epoch FROM clock_timestamp()))::bigint;
  keep_from bigint := floor(extract(epoch FROM clock_timestamp() - retention))::bigint;
  parent text;
  part record;
  top bigint;
  lo bigint;
  hi bigint;
BEGIN
  IF w < 1 THEN
    RAISE EXCEPTION 'history partition width must be at least 1 second, not %', width;
  END IF;
  created := 0;
  dropped := 0;
  PERFORM pg_advisory_xact_lock(hashtext('bpf_stats.history'));
  FOREACH parent IN ARRAY ARRAY['query_stats_history', 'backend_stats_history'] LOOP
    top := NULL;
    FOR part IN
      SELECT c.relname, regexp_match(c.relname, '_(\d+)_(\d+)$') AS b
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = format('bpf_stats.%I', parent)::regclass
    LOOP
      CONTINUE WHEN part.b IS NULL;
      IF part.b[2]::bigint <= keep_from THEN
        EXECUTE format('DROP TABLE bpf_stats.%I', part.relname);
        dropped := dropped + 1;
      ELSE
        top := greatest(top, part.b[2]::bigint);
      END IF;
    END LOOP;
    lo := (now_s / w) * w;
    IF top > lo THEN lo := top; END IF;
    WHILE lo < now_s + 2 * w LOOP
      hi := (lo / w + 1) * w;
      EXECUTE format('CREATE TABLE bpf_stats.%I PARTITION OF bpf_stats.%I FOR VALUES FROM (%L) TO (%L)',
                     parent || '_' || lo || '_' || hi, parent, to_timestamp(lo), to_timestamp(hi));
      created := created + 1;
      lo := hi;
    END LOOP;
  END LOOP;
  RETURN NEXT;
END
$fn$;
