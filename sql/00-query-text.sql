-- Helpers the view files below use. Re-applied when sql/ changed (CREATE OR REPLACE; see
-- src/storage/migrate-schema.ts for when).

-- Creates or replaces a view whose definition holds two placeholders, in this order: %s for the
-- query text expression, then %s for the join that provides it. The text is the one the
-- collector copied from its node's pg_stat_statements into bpf_stats.query_texts, joined per
-- node: a sink holding many nodes shows each node's texts without reaching the node, and never
-- another server's text for the same query id.
CREATE OR REPLACE FUNCTION bpf_stats.create_view_with_query_text(definition text)
RETURNS void LANGUAGE plpgsql
-- Every function here pins its path: a function or operator another role creates in a schema on
-- the caller's path (public.format, public.*(bigint, interval)) must never be a better match.
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  EXECUTE format(definition, 't.query', 'LEFT JOIN bpf_stats.query_texts t USING (node, userid, dbid, toplevel, queryid)');
END
$$;
