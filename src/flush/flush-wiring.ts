import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { CollectorObject } from '../collector/collector-object.js';
import { familyFlushParts, METRIC_COLUMNS, type ProbeSetName } from '../families/index.js';
import { WaitEventsPart } from '../families/waits/wait-events-part.js';
import { WaitEventHistoryPart } from '../families/waits/wait-event-history-part.js';
import { LwlockTrancheNames } from '../postmaster/lwlock-tranche-names.js';
import type { PostmasterTarget, StatusLayout } from '../postmaster/postmaster-target.js';
import { readHeldQueryKeys } from '../retention/held-query-keys.js';
import { DEFAULT_HISTORY_RETENTION_MS, HistoryRetention } from '../retention/history-retention.js';
import { RowRetention } from '../retention/row-retention.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import type { QueryIncrements } from '../storage/query-increments.js';
import { BackendStatsPart } from './backend-stats-part.js';
import { FlushWriter } from './flush-writer.js';
import { HealthPart } from './health-part.js';
import { HistogramsPart } from './histograms-part.js';
import { DEFAULT_HISTORY_INTERVAL_MS, HistoryPart } from './history-part.js';
import { MetricRows } from './metric-rows.js';
import { QueryStatsPart } from './query-stats-part.js';
import { QueryTextsPart } from './query-texts-part.js';

/** The members of struct metrics every flush reads, in METRIC_COLUMNS order. */
export const METRIC_FIELDS = METRIC_COLUMNS.map((c) => c.field);

const COLLECTIONS_RETENTION_MS = 30 * 86_400_000;

/** The run's settings the flush parts take (SidecarOptions has each, with its meaning). */
export interface FlushWiringOptions {
  intervalMs: number;
  log?: (line: string) => void;
  historyRetentionMs?: number | null;
  rowRetentionMs?: number;
  historyPartitionMs?: number;
  historyIntervalMs?: number;
  healthHeartbeatMs?: number;
}

/** What every flush writes with: the metric rows its parts share, the writer, and health and history's own handles. */
export interface FlushWiring {
  rows: MetricRows;
  writer: FlushWriter<BpfStatsDatabase>;
  health: HealthPart;
  retention: HistoryRetention | null;
  rowRetention: RowRetention;
  histograms: HistogramsPart;
  /** The wait events' part, whose written rows each flush reports. */
  waitEvents: WaitEventsPart | undefined;
  texts: QueryTextsPart;
}

/** The parts of every flush, in the order their statements run. */
export function wireFlush(
  db: Kysely<BpfStatsDatabase>,
  increments: QueryIncrements,
  object: CollectorObject<ProbeSetName>,
  target: PostmasterTarget,
  layout: StatusLayout,
  options: FlushWiringOptions,
  /** Writing into a sink under a node role (src/sink/sink.ts). */
  asNode: boolean,
  /** A connection to the node (the control connection, reopened when lost). */
  nodeClient: () => Promise<pg.Client>,
): FlushWiring {
  const rows = new MetricRows(target.pgPid, (records) => object.deleteBackends(records), {
    evictQueries: (keys) => object.maps.evictQueries(keys, METRIC_FIELDS),
    log: options.log,
    version: { majorVersion: target.majorVersion, clientBackendType: layout.clientBackendType },
  });
  const retentionMs = options.historyRetentionMs === undefined ? DEFAULT_HISTORY_RETENTION_MS : options.historyRetentionMs;
  const retention = retentionMs === null ? null : new HistoryRetention(retentionMs, options.historyPartitionMs, asNode);
  // A getter: the postmaster's pid changes when it restarts (target is updated in place).
  const histograms = new HistogramsPart({ evict: (keys) => object.maps.evictHistograms(keys), log: options.log });
  const health = new HealthPart(db, rows, {
    get postmasterPid() {
      return target.pgPid;
    },
    intervalMs: options.intervalMs,
    probeSets: () => object.probes.attached(),
    historyRetentionMs: retentionMs,
    heartbeatMs: options.healthHeartbeatMs,
    evictedHistograms: () => histograms.evicted,
  });
  const texts = new QueryTextsPart();
  const familyParts = familyFlushParts({
    target,
    trancheNames: new LwlockTrancheNames(target.pid, target.binaryPath, target.mappedPath),
    lookupAndDelete: (map, keys) => object.maps.lookupAndDelete(map, keys),
    backendRowKey: (sample) => rows.backendRowKey(sample),
    log: options.log,
  });
  const waitEvents = familyParts.find((part): part is WaitEventsPart => part instanceof WaitEventsPart);
  const writer = new FlushWriter(db, [
    new QueryStatsPart(db, rows, increments),
    texts,
    new BackendStatsPart(db, rows, asNode),
    histograms,
    ...familyParts,
    ...(retention
      ? [new HistoryPart(db, rows, increments, options.historyIntervalMs ?? DEFAULT_HISTORY_INTERVAL_MS, () => histograms.preparedRows)]
      : []),
    ...(retention && waitEvents ? [new WaitEventHistoryPart(waitEvents, options.historyIntervalMs ?? DEFAULT_HISTORY_INTERVAL_MS)] : []),
    health,
  ]);
  // Finished requests keep their documented 30 days unless a row retention is asked for.
  // Which query keys the node still holds is read from the node (its pg_stat_statements and
  // pg_stat_activity), not from the sink, which may be another server.
  const rowRetention = new RowRetention(
    options.rowRetentionMs ?? retentionMs ?? DEFAULT_HISTORY_RETENTION_MS,
    options.rowRetentionMs ?? COLLECTIONS_RETENTION_MS,
    {
      heldKeys: async () => readHeldQueryKeys(await nodeClient()),
      forget: (keys) => texts.forget(keys),
      asNode,
    },
  );
  return { rows, writer, health, retention, rowRetention, histograms, waitEvents, texts };
}
