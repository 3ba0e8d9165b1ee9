-- Up Migration

-- Several nodes (a primary and its standbys, or many servers writing into one central
-- database with `run --sink`) share one bpf_stats: every row says which node it is about, and
-- every key includes the node. The collector names its node on each of its sink connections
-- (the session setting bpf_stats.node, from `run --node`, default host name and port); the
-- column defaults to it, so rows written before this migration belong to the node of the
-- collector that applied it (a non-volatile default is evaluated once for existing rows). A
-- session that names no node cannot write a row (NULL: not-null violation).
ALTER TABLE bpf_stats.query_stats ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.query_stats DROP CONSTRAINT query_stats_pkey,
  ADD PRIMARY KEY (node, userid, dbid, toplevel, queryid);

ALTER TABLE bpf_stats.backend_stats ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.backend_stats DROP CONSTRAINT backend_stats_pkey,
  ADD PRIMARY KEY (node, pid, backend_start);
DROP INDEX bpf_stats.backend_stats_live;
CREATE INDEX backend_stats_live ON bpf_stats.backend_stats (node, pid) WHERE exited_at IS NULL;

ALTER TABLE bpf_stats.query_lock_waits ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.query_lock_waits DROP CONSTRAINT query_lock_waits_pkey,
  ADD PRIMARY KEY (node, userid, dbid, toplevel, queryid, locktype, mode, database, relation);

ALTER TABLE bpf_stats.query_lwlock_waits ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.query_lwlock_waits DROP CONSTRAINT query_lwlock_waits_pkey,
  ADD PRIMARY KEY (node, userid, dbid, toplevel, queryid, tranche, mode);

ALTER TABLE bpf_stats.query_histograms ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.query_histograms DROP CONSTRAINT query_histograms_pkey,
  ADD PRIMARY KEY (node, userid, dbid, toplevel, queryid, kind);

ALTER TABLE bpf_stats.capabilities ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.capabilities DROP CONSTRAINT capabilities_pkey,
  ADD PRIMARY KEY (node, host, kind, probe);

ALTER TABLE bpf_stats.health ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.health DROP CONSTRAINT health_pkey,
  ADD PRIMARY KEY (node, host, pid);

-- History rows are per node too (no key: they are appended).
ALTER TABLE bpf_stats.query_stats_history ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');
ALTER TABLE bpf_stats.backend_stats_history ADD COLUMN node text NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), '');

-- A request is for one node; NULL: whichever collector takes it first (collect() names the
-- node when exactly one collector writes here).
ALTER TABLE bpf_stats.collections ADD COLUMN node text;

-- Query texts travel with the figures: the collector reads them from the node's
-- pg_stat_statements and writes them here, so the sink shows them without the node.
CREATE TABLE bpf_stats.query_texts (
  node        text        NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  userid      oid         NOT NULL,
  dbid        oid         NOT NULL,
  toplevel    boolean     NOT NULL,
  queryid     bigint      NOT NULL,
  query       text        NOT NULL,
  first_seen  timestamptz NOT NULL DEFAULT now(),
  last_seen   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, userid, dbid, toplevel, queryid)
);

-- Down Migration

DROP TABLE bpf_stats.query_texts;
ALTER TABLE bpf_stats.collections DROP COLUMN node;
ALTER TABLE bpf_stats.backend_stats_history DROP COLUMN node;
ALTER TABLE bpf_stats.query_stats_history DROP COLUMN node;
ALTER TABLE bpf_stats.health DROP CONSTRAINT health_pkey, DROP COLUMN node, ADD PRIMARY KEY (host, pid);
ALTER TABLE bpf_stats.capabilities DROP CONSTRAINT capabilities_pkey, DROP COLUMN node, ADD PRIMARY KEY (host, kind, probe);
ALTER TABLE bpf_stats.query_histograms DROP CONSTRAINT query_histograms_pkey, DROP COLUMN node,
  ADD PRIMARY KEY (userid, dbid, toplevel, queryid, kind);
ALTER TABLE bpf_stats.query_lwlock_waits DROP CONSTRAINT query_lwlock_waits_pkey, DROP COLUMN node,
  ADD PRIMARY KEY (userid, dbid, toplevel, queryid, tranche, mode);
ALTER TABLE bpf_stats.query_lock_waits DROP CONSTRAINT query_lock_waits_pkey, DROP COLUMN node,
  ADD PRIMARY KEY (userid, dbid, toplevel, queryid, locktype, mode, database, relation);
DROP INDEX bpf_stats.backend_stats_live;
ALTER TABLE bpf_stats.backend_stats DROP CONSTRAINT backend_stats_pkey, DROP COLUMN node, ADD PRIMARY KEY (pid, backend_start);
CREATE INDEX backend_stats_live ON bpf_stats.backend_stats (pid) WHERE exited_at IS NULL;
ALTER TABLE bpf_stats.query_stats DROP CONSTRAINT query_stats_pkey, DROP COLUMN node,
  ADD PRIMARY KEY (userid, dbid, toplevel, queryid);
