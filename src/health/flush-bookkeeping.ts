import type { Kysely, RawBuilder } from 'kysely';
import type pg from 'pg';
import type { CollectorObject } from '../attach/collector-object.js';
import type { FlushBatch } from '../collect/flush-batch.js';
import { oneLine } from '../errors.js';
import type { BpfStatsDatabase } from '../storage/database.js';
import { HealthReporter, type FlushObservation } from './health-reporter.js';
import { DEFAULT_HISTORY_RETENTION_MS, HistoryRetention } from './history-retention.js';
import { historyInserts } from './history-inserts.js';

export interface BookkeepingOptions {
  postmasterPid: number;
  /** The flush period, shown in health so staleness can be judged. */
  intervalMs: number;
  /** History retention; null: no history is written. Default 7 days. */
  historyRetentionMs?: number | null;
  /** History partition width (default: a seventh of the retention, 1 s to 1 day). */
  historyPartitionMs?: number;
  log: (line: string) => void;
}

/**
 * What each flush writes besides the cumulative tables: its rows again into the history
 * tables, and the collector's bpf_stats.health row, both in the flush's one statement; plus the
 * history's retention, run between flushes when due.
 *
 * @example
 * const books = new FlushBookkeeping(object, { postmasterPid, intervalMs: 1000, log });
 * await books.start(control, db);
 * await writer.write(batch, await books.prepare(db, batch, started)); batch.commit(); books.committed();
 */
export class FlushBookkeeping {
  readonly health: HealthReporter;
  readonly retention: HistoryRetention | null;
  private observation: FlushObservation | null = null;
  private lastMaintenanceError: string | null = null;

  constructor(
    private readonly object: CollectorObject,
    private readonly options: BookkeepingOptions,
  ) {
    const retentionMs = options.historyRetentionMs === undefined ? DEFAULT_HISTORY_RETENTION_MS : options.historyRetentionMs;
    this.retention = retentionMs === null ? null : new HistoryRetention(retentionMs, options.historyPartitionMs);
    this.health = new HealthReporter({ postmasterPid: options.postmasterPid, intervalMs: options.intervalMs, probeSets: () => object.attached(), historyRetentionMs: retentionMs });
  }

  /** The health row, and the history partitions the first flushes need. */
  async start(control: pg.ClientBase, db: Kysely<BpfStatsDatabase>): Promise<void> {
    await this.health.start(control);
    await this.retention?.maintain(db);
    this.options.log(
      this.retention
        ? `history: each flush's increments kept ${seconds(this.retention.retentionMs)} in partitions of ${seconds(this.retention.widthMs)}`
        : 'history: off (--history-retention off)',
    );
  }

  /**
   * Runs retention when due, reads the BPF counters and map fill, and returns the statements
   * the flush runs with its own, in one statement (history rows, health row).
   */
  async prepare(db: Kysely<BpfStatsDatabase>, batch: FlushBatch, startedMs: number): Promise<() => RawBuilder<unknown>[]> {
    await this.maintain(db);
    const observation: FlushObservation = {
      rows: batch.queries.length + batch.backends.length,
      ms: 0,
      counters: this.object.readCounters(),
      fill: this.object.mapFill(),
    };
    this.observation = observation;
    const history = this.retention ? historyInserts(batch) : [];
    return () => {
      observation.ms = performance.now() - startedMs;
      return [...history, this.health.statement(observation)];
    };
  }

  committed(): void {
    if (this.observation) this.health.committed(this.observation);
    this.observation = null;
  }

  /** A flush failed; `batch` is what it had prepared (null if it failed before). */
  async failed(db: Kysely<BpfStatsDatabase>, error: unknown, batch: FlushBatch | null): Promise<void> {
    // A missing partition (a clock jump, a long pause) must not wait for the next period.
    this.retention?.soon();
    const pending = batch ? batch.queries.length + batch.backends.length : null;
    await this.health.failed(db, oneLine(error), pending, this.observation);
    this.observation = null;
  }

  async stopped(db: Kysely<BpfStatsDatabase>): Promise<void> {
    await this.health.stopped(db);
  }

  /** Retention problems (a reader holding a lock) are logged once and retried; they never stop a flush. */
  private async maintain(db: Kysely<BpfStatsDatabase>): Promise<void> {
    if (!this.retention?.due()) return;
    try {
      await this.retention.maintain(db);
      this.lastMaintenanceError = null;
    } catch (error) {
      const message = oneLine(error);
      if (message !== this.lastMaintenanceError) this.options.log(`history retention failed, will retry: ${message}`);
      this.lastMaintenanceError = message;
    }
  }
}

function seconds(ms: number): string {
  return ms % 86_400_000 === 0 ? `${ms / 86_400_000} d` : ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : `${ms / 1000} s`;
}
