-- Helpers the view files below use. Re-applied on every start (CREATE OR REPLACE).

-- Creates or replaces a view whose definition holds two placeholders, in this order: %s for the
-- query text expression, then %s for the join that provides it. The text joins in only where
-- pg_stat_statements is installed in this database (elsewhere the column is NULL), so every view
-- that shows query text is re-created on each start and picks the extension up once installed.
CREATE OR REPLACE FUNCTION bpf_stats.create_view_with_query_text(definition text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements') THEN
    EXECUTE format(definition, 's.query', 'LEFT JOIN pg_stat_statements s USING (userid, dbid, toplevel, queryid)');
  ELSE
    EXECUTE format(definition, 'NULL::text', '');
  END IF;
END
$$;
