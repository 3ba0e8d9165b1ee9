-- Up Migration

-- The nodes allowed to write into this bpf_stats (run --sink), each under a login role of its
-- own: row-level security (sql/95-sink-nodes.sql) lets that role see and write only rows whose
-- node is its own, and only take collection requests made for it. Registered by the schema's
-- owner with bpf_stats.add_node(node, role) (`pg-bpf-stats sink-node add`). The owner's own
-- collector (a server writing into its own database, no --sink) is not a node role: owners
-- bypass row-level security, so the single-node path pays nothing for it.
CREATE TABLE bpf_stats.nodes (
  node     text        PRIMARY KEY CHECK (node ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$'),
  role     name        NOT NULL UNIQUE,
  added_at timestamptz NOT NULL DEFAULT now()
);

-- Texts were stored whole until the collector read them cut (src/sink/query-texts-part.ts):
-- cut what is stored, and refuse longer ones from a node that writes them by hand.
UPDATE bpf_stats.query_texts SET query = left(query, 1024) WHERE length(query) > 1024;
ALTER TABLE bpf_stats.query_texts ADD CONSTRAINT query_texts_query_bound CHECK (length(query) <= 1024);

-- Down Migration

ALTER TABLE bpf_stats.query_texts DROP CONSTRAINT query_texts_query_bound;
DROP TABLE bpf_stats.nodes;
