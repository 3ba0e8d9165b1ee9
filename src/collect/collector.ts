import type { BackendSample, CollectorObject, QuerySample } from '../attach/collector-object.js';
import { BackendTypeNames } from './backend-type-names.js';
import { DeltaTracker } from './delta-tracker.js';
import type { HistogramSample } from './decode-histograms.js';
import { HistogramDeltas } from './histogram-deltas.js';
import type { BackendRow, FlushBatch, QueryRow } from './flush-batch.js';
import { bootTimeSeconds } from '../target/proc-stat.js';
import { METRIC_COLUMNS, toColumnValues, type ProbeSetName } from './metric-columns.js';

/** What the maps held at one moment. */
export interface CollectorSnapshot {
  queries: QuerySample[];
  backends: BackendSample[];
  histograms?: HistogramSample[];
}

/** Postgres timestamps count microseconds from 2000-01-01. */
const PG_EPOCH_UNIX_US = 946_684_800_000_000n;
const IDENTITY_GRACE_NS = 5_000_000_000n;
/*
 * A process without PgBackendStatus is keyed by its start time as /proc/<pid>/stat shows it
 * (boot time + start), which stays the same across flushes and collector restarts.
 */
const BOOT_TIME_UNIX_US = BigInt(bootTimeSeconds()) * 1_000_000n;

/**
 * Turns the BPF maps' cumulative figures into the increments one flush writes.
 *
 * @example
 * const collector = new Collector(object, target.pid);
 * const batch = collector.prepare(collector.read(), new Set(['cpu']));
 * await writer.write(batch);
 * batch.commit();
 */
export class Collector {
  readonly backendTypes: BackendTypeNames;
  private readonly fields: string[];
  private readonly queryDeltas = new DeltaTracker();
  private readonly backendDeltas = new DeltaTracker();
  private readonly histogramDeltas = new HistogramDeltas();

  /** CLOCK_MONOTONIC to wall clock, fixed once so that derived timestamps are stable. */
  private readonly monotonicToUnixUs = BigInt(Date.now()) * 1000n - process.hrtime.bigint() / 1000n;

  constructor(
    private readonly object: CollectorObject,
    private readonly postmasterPid: number,
  ) {
    this.backendTypes = new BackendTypeNames(postmasterPid);
    this.fields = METRIC_COLUMNS.map((c) => c.field);
  }

  /** Reads the BPF maps once; prepare() turns the snapshot into a batch. */
  read(): CollectorSnapshot {
    return {
      queries: this.object.readQueries(this.fields),
      backends: this.object.readBackends(this.fields),
      histograms: this.object.readHistograms(),
    };
  }

  /** A live backend pg_stat_activity has not named for us yet is in the snapshot (observe() it first). */
  needsNames(snapshot: CollectorSnapshot): boolean {
    return snapshot.backends.some((s) => s.identityKnown && s.exitedNs === 0n && !this.backendTypes.knows(s.pid));
  }

  /** `measured`: the probe sets that were attached at any time since the last flush. */
  prepare(snapshot: CollectorSnapshot, measured: ReadonlySet<ProbeSetName>): FlushBatch {
    const commits: Array<() => void> = [];
    const queries: QueryRow[] = [];
    for (const sample of snapshot.queries) {
      const key = queryKey(sample);
      const delta = this.queryDeltas.delta(key, sample.metrics);
      if (delta.every((d) => d === 0n)) continue;
      queries.push({
        userid: sample.userid,
        dbid: sample.dbid,
        toplevel: sample.toplevel,
        queryid: BigInt.asIntN(64, sample.queryid).toString(),
        values: toColumnValues(delta, measured),
      });
      commits.push(() => this.queryDeltas.commit(key, sample.metrics));
    }

    const backends: BackendRow[] = [];
    const exited: number[] = [];
    const samples = snapshot.backends;
    for (const sample of samples) this.backendTypes.learn(sample.pid, sample.backendType);
    for (const sample of samples) {
      const key = backendKey(sample);
      const isExited = sample.exitedNs !== 0n;
      // A new backend publishes its PgBackendStatus within milliseconds of fork; until then its
      // row key (pid, backend_start) is not final, so it waits, unless it never will have one.
      const ageNs = process.hrtime.bigint() - sample.taskStartNs;
      if (!sample.identityKnown && !isExited && ageNs < IDENTITY_GRACE_NS && sample.pid !== this.postmasterPid) continue;
      const delta = this.backendDeltas.delta(key, sample.metrics);
      if (!isExited && delta.every((d) => d === 0n) && this.backendDeltas.has(key)) continue;
      backends.push({
        pid: sample.pid,
        backendStartUs:
          sample.backendStartUs !== 0n
            ? sample.backendStartUs + PG_EPOCH_UNIX_US
            : sample.taskStartNs / 1000n + BOOT_TIME_UNIX_US,
        backendType: this.backendTypes.name(sample),
        datid: sample.identityKnown && sample.dbid ? sample.dbid : null,
        usesysid: sample.identityKnown && sample.userid ? sample.userid : null,
        queryid: sample.queryid ? BigInt.asIntN(64, sample.queryid).toString() : null,
        values: toColumnValues(delta, measured),
        exitedAtUs: isExited ? sample.exitedNs / 1000n + this.monotonicToUnixUs : null,
      });
      if (isExited) {
        exited.push(sample.pid);
        commits.push(() => {
          this.backendDeltas.forget(key);
          this.backendTypes.forget(sample.pid);
        });
      } else {
        commits.push(() => this.backendDeltas.commit(key, sample.metrics));
      }
    }

    const histograms = this.histogramDeltas.prepare(snapshot.histograms ?? []);
    commits.push(histograms.commit);

    return {
      queries,
      backends,
      histograms: histograms.rows,
      commit: () => {
        for (const commit of commits) commit();
        this.object.deleteBackends(exited);
      },
    };
  }
}

function queryKey(s: QuerySample): string {
  return `${s.userid}/${s.dbid}/${s.toplevel ? 1 : 0}/${s.queryid}`;
}

function backendKey(s: BackendSample): string {
  return `${s.pid}/${s.taskStartNs}`;
}
