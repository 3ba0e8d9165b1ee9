-- Up Migration

-- Read through the view bpf_stats.query_wait_blockers (sql/45-wait-events.sql).
-- Who ended each wait (opt-in probe set `blockers`; bpf/wait-blockers.bpf.h): the sleeps of
-- query_wait_event_stats that the set saw woken, per waker: its backend type as pg_stat_activity
-- names it (or 'interrupt', 'kernel thread', 'postmaster', 'other process', 'postmaster child'),
-- and the query key it was on when it woke the waiter (all zero: none). Cumulative.
CREATE TABLE bpf_stats.query_wait_blocker_stats (
  node            text             NOT NULL DEFAULT nullif(current_setting('bpf_stats.node', true), ''),
  userid          oid              NOT NULL,
  dbid            oid              NOT NULL,
  toplevel        boolean          NOT NULL,
  queryid         bigint           NOT NULL,
  wait_event_type text             NOT NULL,
  wait_event      text             NOT NULL,
  waker_type      text             NOT NULL,
  waker_userid    oid              NOT NULL,
  waker_dbid      oid              NOT NULL,
  waker_toplevel  boolean          NOT NULL,
  waker_queryid   bigint           NOT NULL,
  waits           bigint           NOT NULL DEFAULT 0,
  wait_time_ms    double precision NOT NULL DEFAULT 0,
  stats_since     timestamptz      NOT NULL DEFAULT now(),
  last_seen       timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (node, userid, dbid, toplevel, queryid, wait_event_type, wait_event, waker_type,
               waker_userid, waker_dbid, waker_toplevel, waker_queryid)
) WITH (fillfactor = 50);

-- Down Migration

DROP TABLE bpf_stats.query_wait_blocker_stats;
