-- Up Migration

-- Read through the views bpf_stats.query_wait_events and backend_wait_events (sql/45-wait-events.sql).
-- Off-CPU time per PostgreSQL wait event (probe set `cpu`, always on; bpf/wait-events.bpf.h):
-- each sleep of a backend charged, with one wait, to the wait event it had set when it went to
-- sleep, named as that version's pg_stat_activity names it ('' and '' for a sleep without a
-- wait event; '#<id>' for an id the version's table does not know). Cumulative.
-- Per query: the sleeps in query_stats' io/lock/lwlock/other wait columns (not the idle time
-- waiting for the client); waits before the statement had its query id are under queryid 0.
CREATE TABLE bpf_stats.query_wait_event_stats (
  node            text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  userid          oid              NOT NULL,
  dbid            oid              NOT NULL,
  toplevel        boolean          NOT NULL,
  queryid         bigint           NOT NULL,
  wait_event_type text             NOT NULL,
  wait_event      text             NOT NULL,
  waits           bigint           NOT NULL DEFAULT 0,
  wait_time_ms    double precision NOT NULL DEFAULT 0,
  runq_after_ms   double precision NOT NULL DEFAULT 0,
  stats_since     timestamptz      NOT NULL DEFAULT now(),
  last_seen       timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (node, userid, dbid, toplevel, queryid, wait_event_type, wait_event)
) WITH (fillfactor = 50);

-- Per backend (its backend_stats row: pid, backend_start): every sleep, its idle time waiting
-- for the client (Client:ClientRead) included.
CREATE TABLE bpf_stats.backend_wait_event_stats (
  node            text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  pid             integer          NOT NULL,
  backend_start   timestamptz      NOT NULL,
  wait_event_type text             NOT NULL,
  wait_event      text             NOT NULL,
  waits           bigint           NOT NULL DEFAULT 0,
  wait_time_ms    double precision NOT NULL DEFAULT 0,
  runq_after_ms   double precision NOT NULL DEFAULT 0,
  stats_since     timestamptz      NOT NULL DEFAULT now(),
  last_seen       timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (node, pid, backend_start, wait_event_type, wait_event)
) WITH (fillfactor = 50);

-- Down Migration

DROP TABLE bpf_stats.backend_wait_event_stats;
DROP TABLE bpf_stats.query_wait_event_stats;
