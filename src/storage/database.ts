import type { ColumnType, Generated, Kysely } from 'kysely';
import type { FamilyMetricColumn } from '../families/index.js';

/*
 * Every bpf_stats table the sidecar writes or reads, as kysely sees it (migrations/ own the
 * tables). bigint columns come back as strings (pg keeps all 64 bits); timestamps as Date.
 */

/** An int8 column: read as a string, written from a number, a bigint's digits or a string. */
type Int8 = ColumnType<string, number | string, number | string>;
/** A column the server fills by default when the insert leaves it out. */
type Defaulted<T> = ColumnType<T, T | undefined, T>;
/** An int8 column with a default. */
type DefaultedInt8 = ColumnType<string, number | string | undefined, number | string>;

/** A metric column's type from its unit: ms are float8, counts int8; NULL when no set measured it. */
type MetricColumnType<C> = C extends { unit: 'ns' }
  ? number | null
  : ColumnType<string | null, number | string | null, number | string | null>;

/**
 * The metric columns shared by query_stats, backend_stats and their history tables, derived
 * from the families' column lists (src/families/): a column is declared once, in its family.
 */
export type MetricColumns = { [C in FamilyMetricColumn as C['column']]: MetricColumnType<C> };

/**
 * The node a row is about (migrations/1763990000000_sink-node.sql): filled by default from the
 * writing session's bpf_stats.node, so inserts leave it out.
 */
interface NodeKey {
  node: Defaulted<string>;
}

/** pg_stat_statements' key, per node. */
interface QueryKey extends NodeKey {
  userid: number;
  dbid: number;
  toplevel: boolean;
  /** bigint: pg returns it as a string to keep all 64 bits. */
  queryid: string;
}

export interface QueryStatsTable extends MetricColumns, QueryKey {
  stats_since: Generated<Date>;
  last_seen: Date;
}

export interface BackendStatsTable extends MetricColumns, NodeKey {
  pid: number;
  backend_start: Date;
  backend_type: string;
  datid: number | null;
  usesysid: number | null;
  queryid: string | null;
  cgroup: string | null;
  last_seen: Date;
  exited_at: Date | null;
}

export interface QueryStatsHistoryTable extends MetricColumns, QueryKey {
  ts: Date;
}

export interface BackendStatsHistoryTable extends MetricColumns, NodeKey {
  ts: Date;
  pid: number;
  backend_start: Date;
  backend_type: string;
  datid: number | null;
  usesysid: number | null;
  queryid: string | null;
}

export interface QueryHistogramsTable extends QueryKey {
  kind: string;
  counts: ColumnType<string[], Array<number | string>, Array<number | string>>;
  observations: Int8;
  max_ms: number;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

export interface QueryLockWaitsTable extends QueryKey {
  locktype: string;
  mode: string;
  database: Defaulted<number>;
  relation: Defaulted<number>;
  waits: DefaultedInt8;
  wait_time_ms: Defaulted<number>;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

export interface QueryLwlockWaitsTable extends QueryKey {
  tranche: string;
  mode: string;
  waits: DefaultedInt8;
  wait_time_ms: Defaulted<number>;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

/** Off-CPU time per wait event of one query (src/families/waits/). */
export interface QueryWaitEventsTable extends QueryKey {
  wait_event_type: string;
  wait_event: string;
  waits: DefaultedInt8;
  wait_time_ms: Defaulted<number>;
  runq_after_ms: Defaulted<number>;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

/** Sleeps per query and wait event by who woke them (src/families/blockers/). */
export interface QueryWaitBlockersTable extends QueryKey {
  wait_event_type: string;
  wait_event: string;
  waker_type: string;
  waker_userid: number;
  waker_dbid: number;
  waker_toplevel: boolean;
  waker_queryid: string;
  waits: DefaultedInt8;
  wait_time_ms: Defaulted<number>;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

/** Off-CPU time per wait event of one backend (its backend_stats row's pid and backend_start). */
export interface BackendWaitEventsTable extends NodeKey {
  pid: number;
  backend_start: Date;
  wait_event_type: string;
  wait_event: string;
  waits: DefaultedInt8;
  wait_time_ms: Defaulted<number>;
  runq_after_ms: Defaulted<number>;
  stats_since: Generated<Date>;
  last_seen: Defaulted<Date>;
}

/** A bpf_stats.collect() request (status: pending, running, done, failed, rejected, stopped). */
export interface CollectionsTable {
  id: ColumnType<string, never, never>;
  requested_by: Defaulted<string>;
  requested_at: Generated<Date>;
  probes: string[];
  /** An interval, as text. */
  duration: string | null;
  status: Defaulted<string>;
  started_at: Date | null;
  finished_at: Date | null;
  error: string | null;
  /** The node the request is for; NULL: whichever collector takes it. */
  node: string | null;
}

export interface CapabilitiesTable extends NodeKey {
  host: string;
  kind: 'requirement' | 'feature' | 'probe set';
  probe: string;
  available: boolean;
  required: boolean;
  reason: string;
  checked_at: Generated<Date>;
}

/** One collector's row (src/flush/health-part.ts). */
export interface HealthTable extends NodeKey {
  host: string;
  pid: number;
  version: string;
  postmaster_pid: number;
  probe_sets: string[];
  started_at: Date;
  interval_ms: number;
  last_flush_at: Date | null;
  flush_ms: number | null;
  flushes: DefaultedInt8;
  rows_written: DefaultedInt8;
  last_rows: Defaulted<number>;
  dropped_events: DefaultedInt8;
  dropped: Defaulted<unknown>;
  map_fill_pct: Defaulted<number>;
  map_fill: Defaulted<unknown>;
  pending_rows: Defaulted<number>;
  failed_flushes: DefaultedInt8;
  last_error: string | null;
  last_error_at: Date | null;
  /** An interval, as text. */
  history_retention: string | null;
  updated_at: Generated<Date>;
  stopped_at: Date | null;
  stop_reason: string | null;
}

/** A query's text as the node's pg_stat_statements had it (src/flush/query-texts-part.ts). */
export interface QueryTextsTable extends QueryKey {
  query: string;
  first_seen: Generated<Date>;
  last_seen: Defaulted<Date>;
}

/** The bpf_stats schema as kysely sees it. */
export interface BpfStatsDatabase {
  'bpf_stats.query_stats': QueryStatsTable;
  'bpf_stats.backend_stats': BackendStatsTable;
  'bpf_stats.query_stats_history': QueryStatsHistoryTable;
  'bpf_stats.backend_stats_history': BackendStatsHistoryTable;
  'bpf_stats.query_histograms': QueryHistogramsTable;
  'bpf_stats.query_lock_waits': QueryLockWaitsTable;
  'bpf_stats.query_lwlock_waits': QueryLwlockWaitsTable;
  'bpf_stats.query_wait_event_stats': QueryWaitEventsTable;
  'bpf_stats.backend_wait_event_stats': BackendWaitEventsTable;
  'bpf_stats.query_wait_blocker_stats': QueryWaitBlockersTable;
  'bpf_stats.collections': CollectionsTable;
  'bpf_stats.capabilities': CapabilitiesTable;
  'bpf_stats.health': HealthTable;
  'bpf_stats.query_texts': QueryTextsTable;
}

/** The handle every bpf_stats statement goes through. */
export type BpfStatsDb = Kysely<BpfStatsDatabase>;
