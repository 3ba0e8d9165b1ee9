import { sql, type Kysely } from 'kysely';
import { oneLine } from '../errors.js';
import type { BpfStatsDatabase } from '../storage/database.js';

export const DEFAULT_HISTORY_RETENTION_MS = 7 * 86_400_000;
const DAY_MS = 86_400_000;
const MAX_CHECK_PERIOD_MS = 5 * 60_000;

/**
 * Keeps the history tables bounded: they are range-partitioned by ts, partitions `widthMs`
 * wide are created ahead and dropped whole once all their rows are older than `retentionMs`
 * (bpf_stats.maintain_history in sql/60-health.sql). Rows live between retention and
 * retention + width. The width defaults to a seventh of the retention (one day for the
 * default 7 days), between 1 second and 1 day.
 *
 * @example
 * const retention = new HistoryRetention(DEFAULT_HISTORY_RETENTION_MS);
 * if (retention.due()) await retention.maintain(db);
 */
export class HistoryRetention {
  readonly widthMs: number;
  private nextAt = 0;
  private lastError: string | null = null;

  constructor(
    readonly retentionMs: number,
    widthMs?: number,
    /**
     * Writing into a sink under a node role, which may not create or drop tables: the sink's
     * bpf_stats.node_maintain_history() makes the partitions, with the sink's retention and width.
     */
    readonly asNode = false,
  ) {
    // Whole seconds: partition bounds are epoch seconds.
    this.widthMs = Math.max(1, Math.round((widthMs ?? Math.min(DAY_MS, retentionMs / 7)) / 1000)) * 1000;
  }

  /** Whether maintenance should run now: partitions are created two widths ahead, so checking a few times per width is plenty. */
  due(now = Date.now()): boolean {
    return now >= this.nextAt;
  }

  /** The next flush runs maintenance again (e.g. after a flush failed: maybe a partition is missing). */
  soon(): void {
    this.nextAt = 0;
  }

  /** Runs maintain() when due; a failure (a reader holding a lock) is logged once and retried, and never stops a flush. */
  async maintainWhenDue(db: Kysely<BpfStatsDatabase>, log: (line: string) => void): Promise<void> {
    if (!this.due()) return;
    try {
      await this.maintain(db);
      this.lastError = null;
    } catch (error) {
      const message = oneLine(error);
      if (message !== this.lastError) log(`history retention failed, will retry: ${message}`);
      this.lastError = message;
    }
  }

  /** Creates the partitions ahead and drops expired ones, in a transaction that gives way to readers holding locks. */
  async maintain(db: Kysely<BpfStatsDatabase>): Promise<{ created: number; dropped: number }> {
    // Set first: a failure (lock timeout) is retried at the next period, not at every flush.
    this.nextAt = Date.now() + Math.min(this.widthMs / 4, MAX_CHECK_PERIOD_MS);
    const result = await db.transaction().execute(async (tx) => {
      // DROP and CREATE ... PARTITION OF lock the parent: never queue the flushes behind a long report.
      await sql`SET LOCAL lock_timeout = '2s'`.execute(tx);
      const { rows } = this.asNode
        ? await sql<{ created: number; dropped: number }>`SELECT created, dropped FROM bpf_stats.node_maintain_history()`.execute(tx)
        : await sql<{ created: number; dropped: number }>`
        SELECT created, dropped FROM bpf_stats.maintain_history(
          ${`${this.retentionMs} milliseconds`}::interval, ${`${this.widthMs / 1000} seconds`}::interval)`.execute(tx);
      return rows[0]!;
    });
    return result;
  }
}
