-- Up Migration

-- Heavyweight lock waits per query (probe set `locks`), by what was waited for, named as
-- pg_locks names it. `database` / `relation` are the lock tag's when it has them (relation,
-- extend, page, tuple: both; frozenid, object, advisory, applytransaction: database), else 0.
-- Cumulative; a wait counts once it ended without an error: waits cut short by lock_timeout,
-- statement_timeout or a cancel (and, with USDT, a deadlock) are in lock_wait_ms only.
-- wait_time_ms is wall time from the wait's start to its end (it includes the run-queue wait
-- after the backend was woken), so it is a little more than the sleep lock_wait_ms counts.
CREATE TABLE bpf_stats.query_lock_waits (
  userid       oid              NOT NULL,
  dbid         oid              NOT NULL,
  toplevel     boolean          NOT NULL,
  queryid      bigint           NOT NULL,
  locktype     text             NOT NULL,
  mode         text             NOT NULL,
  database     oid              NOT NULL DEFAULT 0,
  relation     oid              NOT NULL DEFAULT 0,
  waits        bigint           NOT NULL DEFAULT 0,
  wait_time_ms double precision NOT NULL DEFAULT 0,
  stats_since  timestamptz      NOT NULL DEFAULT now(),
  last_seen    timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (userid, dbid, toplevel, queryid, locktype, mode, database, relation)
);

-- LWLock waits per query (probe set `lwlock`), by tranche as pg_stat_activity.wait_event
-- names it, and mode ('exclusive', 'shared', 'wait_until_free'; 'unknown' without USDT).
CREATE TABLE bpf_stats.query_lwlock_waits (
  userid       oid              NOT NULL,
  dbid         oid              NOT NULL,
  toplevel     boolean          NOT NULL,
  queryid      bigint           NOT NULL,
  tranche      text             NOT NULL,
  mode         text             NOT NULL,
  waits        bigint           NOT NULL DEFAULT 0,
  wait_time_ms double precision NOT NULL DEFAULT 0,
  stats_since  timestamptz      NOT NULL DEFAULT now(),
  last_seen    timestamptz      NOT NULL DEFAULT now(),
  PRIMARY KEY (userid, dbid, toplevel, queryid, tranche, mode)
);

-- Down Migration

DROP TABLE bpf_stats.query_lwlock_waits;
DROP TABLE bpf_stats.query_lock_waits;
