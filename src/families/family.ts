import type { FieldOf, MapName, ProgramName, RodataName } from '../bpf/contract.js';
import type { BackendSample } from '../collector/map-samples.js';
import type { PerfEventSpec } from '../collector/perf-events.js';
import type { ProbeAttachment } from '../collector/probe-attachment.js';
import type { VerifierRefusal } from '../collector/verifier-refusal.js';
import type { FlushPart } from './flush-part.js';
import type { LwlockTrancheNames } from '../postmaster/lwlock-tranche-names.js';
import type { PostmasterTarget, StatusLayout } from '../postmaster/postmaster-target.js';

/*
 * The one seam a family of metrics plugs into. A family is one folder of src/families/ and
 * contributes, in one object:
 *   - its probe sets: the names a DBA attaches (`--probes`, bpf_stats.collect()), each with the
 *     programs it attaches and the one answer to "can it run here?";
 *   - its metric columns: the columns of query_stats / backend_stats (and their history) that
 *     its sets fill from `struct metrics`. The kysely table types derive the column names from
 *     these lists, so a new column is declared here and nowhere else in TypeScript;
 *   - optionally, settings of its BPF programs (.rodata) and a flush part for tables of its own.
 * src/families/index.ts lists the families; everything else reads them through it.
 *
 * Adding a scheduler counter: a line of SCHED_COUNTERS (bpf/records.h), a column here in cpu/,
 * a migration adding it to the tables, and the view that shows it.
 */

/** Everything that decides whether a probe set can run: the Postgres, its calibrated status layout, the object's settings. */
export interface SupportContext {
  target: PostmasterTarget;
  /**
   * Where PgBackendStatus keeps what BPF reads, calibrated on a live backend; null when it
   * could not be calibrated (e.g. `check` without the privileges to read backend memory).
   */
  layout: StatusLayout | null;
  /** Perf events that replace a program's own (CollectorObjectOptions.perfEvents). */
  perfEvents: Partial<Record<ProgramName, PerfEventSpec>>;
  /** Sets whose programs this kernel's verifier refused, with the refusal (once the object is loaded). */
  refused?: ReadonlyMap<string, VerifierRefusal>;
}

/** A named group of probes a DBA switches on or off. */
export interface ProbeSet<Name extends string = string> {
  name: Name;
  description: string;
  /** Always attached by `run`; the others are opt-in. */
  default: boolean;
  /**
   * A default set that `run` attaches only where it is supported (logging why not) instead of
   * refusing to start; `check` shows it as optional.
   */
  whereSupported?: boolean;
  /**
   * Why this set cannot run here, or null when it can. Called only through
   * probeSetUnsupportedReason (src/capabilities/probe-set-support.ts), which adds what every set shares.
   */
  unsupportedReason(context: SupportContext): string | null;
  attachments: readonly ProbeAttachment[];
  /** Measured cost, for `check` and the docs (bench/overhead.ts). */
  cost: string;
}

/** How one column of query_stats / backend_stats is filled from `struct metrics` (bpf/records.h). */
export interface MetricColumn<Set extends string = string> {
  column: string;
  /** Member of struct metrics (a name the generated contract checks). */
  field: FieldOf<'metrics'>;
  /** ns fields become milliseconds (float8); counts stay integers (int8). */
  unit: 'ns' | 'count';
  /**
   * ns columns only: the time is a detail already counted in one of the parts of total_time_ms
   * ("of which"), so it is never added to them; `report` names it as the cause of the part that grew.
   */
  alreadyCounted?: true;
  /** The column is NULL unless one of these sets was attached during the flush's interval. */
  measuredBy: readonly Set[];
  /**
   * What the column means, with its unit and the set that fills it: the COMMENT ON of this
   * column in every bpf_stats relation that has it (src/storage/metric-column-comments.ts), so
   * `\d+` in psql documents it.
   */
  description: string;
}

/** What a family's flush part may need from the running sidecar. */
export interface FamilyFlushContext {
  target: PostmasterTarget;
  /** Names LWLock tranche ids the probes could not name (no USDT). */
  trancheNames: LwlockTrancheNames;
  /** Deletes keys from a map, returning each value as it was deleted (null: already gone); for evicting quiet entries. */
  lookupAndDelete?: (map: MapName, rawKeys: Buffer[]) => Array<Buffer | null>;
  /** The backend_stats row a process's record is written as (MetricRows.backendRowKey); null while not final. */
  backendRowKey?: (sample: BackendSample) => { pid: number; backendStartUs: bigint } | null;
  /** For the one line a part may have to say (e.g. eviction unsupported on this kernel). */
  log?: (line: string) => void;
}

/** What one family contributes. Declare it with defineFamily() so its names stay literal types. */
export interface Family<Set extends string = string> {
  name: string;
  probeSets: { readonly [S in Set]: ProbeSet<S> };
  columns: readonly MetricColumn<Set>[];
  /** Settings of the family's BPF programs for this target, written before load. */
  rodata?(target: PostmasterTarget): Partial<Record<RodataName, number>>;
  /** The family's part of every flush, for tables of its own (e.g. the lock waits). */
  flushPart?(context: FamilyFlushContext): FlushPart;
}

/**
 * Declares a family, keeping its set and column names as literal types (ProbeSetName and the
 * table types derive from them) and checking that each column is measured by the family's own sets.
 *
 * @example
 * export const queryFamily = defineFamily({ name: 'query', probeSets: { query: {...} }, columns: [...] });
 */
export function defineFamily<const Set extends string, const Columns extends readonly MetricColumn<NoInfer<Set>>[]>(
  family: Omit<Family<Set>, 'columns'> & { columns: Columns },
): Omit<Family<Set>, 'columns'> & { columns: Columns } {
  return family;
}
