import type { RodataName } from '../bpf/contract.js';
import { UserError } from '../errors.js';
import type { FlushPart } from './flush-part.js';
import type { PostmasterTarget } from '../postmaster/postmaster-target.js';
import { blockersFamily } from './blockers/blockers-family.js';
import { cpuFamily } from './cpu/cpu-family.js';
import type { FamilyFlushContext, MetricColumn, ProbeSet } from './family.js';
import { ioFamily } from './io/io-family.js';
import { latencyFamily } from './latency/latency-family.js';
import { llcFamily } from './llc/llc-family.js';
import { locksFamily } from './locks/locks-family.js';
import { memoryFamily } from './memory/memory-family.js';
import { queryFamily } from './query/query-family.js';
import { waitsFamily } from './waits/waits-family.js';

/** Every family of metrics (src/families/family.ts). A new family is one folder and one entry here. */
export const FAMILIES = [
  cpuFamily,
  queryFamily,
  locksFamily,
  memoryFamily,
  ioFamily,
  latencyFamily,
  llcFamily,
  waitsFamily,
  blockersFamily,
] as const;

type AnyFamily = (typeof FAMILIES)[number];
type SetsOf<F> = F extends { probeSets: infer Sets } ? keyof Sets & string : never;

/** The probe sets a DBA can switch on; `cpu` is always on. */
export type ProbeSetName = SetsOf<AnyFamily>;

/** One metric column as its family declared it (literal names). */
export type FamilyMetricColumn = AnyFamily['columns'][number];
/** The metric columns of query_stats / backend_stats and their history tables. */
export type MetricColumnName = FamilyMetricColumn['column'];

/** Every probe set, by name. */
export const PROBE_SETS = Object.assign({}, ...FAMILIES.map((f) => f.probeSets)) as { readonly [S in ProbeSetName]: ProbeSet<S> };

/** Every metric column, in the order the flush writes them (families in FAMILIES order). */
export const METRIC_COLUMNS: readonly (FamilyMetricColumn & MetricColumn<ProbeSetName>)[] = FAMILIES.flatMap(
  (f): readonly FamilyMetricColumn[] => f.columns,
);

/** The settings every family adds to the BPF object for this target. */
export function familyRodata(target: PostmasterTarget): Partial<Record<RodataName, number>> {
  return Object.assign({}, ...FAMILIES.map((f) => f.rodata?.(target) ?? {}));
}

/** The flush parts of the families that write tables of their own. */
export function familyFlushParts(context: FamilyFlushContext): FlushPart[] {
  return FAMILIES.flatMap((f) => (f.flushPart ? [f.flushPart(context)] : []));
}

/**
 * Validates probe set names given by a user (CLI flag or SQL request).
 *
 * @example
 * parseProbeSets('cpu,query'); // ['cpu', 'query']
 */
export function parseProbeSets(input: string | readonly string[]): ProbeSetName[] {
  const names = (typeof input === 'string' ? input.split(',') : [...input]).map((s) => s.trim()).filter(Boolean);
  const unknown = names.filter((n) => !isProbeSetName(n));
  if (unknown.length) {
    throw new UserError(`unknown probe set ${unknown.join(', ')}: known sets are ${Object.keys(PROBE_SETS).join(', ')}`);
  }
  return [...new Set(names as ProbeSetName[])];
}

export function isProbeSetName(name: string): name is ProbeSetName {
  return Object.hasOwn(PROBE_SETS, name);
}
