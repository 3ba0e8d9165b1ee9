import { PROBE_SETS } from '../families/index.js';
import type { ProbeSetName } from '../families/index.js';

/** The longest collection a request may ask for; NULL durations mean "until stopped", capped here. */
export const MAX_COLLECTION_MS = 24 * 3600 * 1000;
/** Probe names a request may list, and how long each may be (as bpf_stats.collect checks). */
const MAX_PROBES = 32;
const MAX_NAME = 63;

/** A bpf_stats.collections row as the sidecar reads it; nothing in it is trusted. */
export interface CollectionRow {
  id: unknown;
  probes: unknown;
  /** extract(epoch FROM duration), or null. */
  duration_s: unknown;
}

export type CollectionRequest =
  | { ok: true; id: number; sets: ProbeSetName[]; durationMs: number }
  | { ok: false; id: number; error: string };

/**
 * Validates a collection request row: probe names ('default' = the always-on sets) must be
 * known to PROBE_SETS and supported here (`unsupportedReason`: the sidecar's, the one answer
 * `run` and `check` give too), and the duration positive and at most
 * MAX_COLLECTION_MS (NULL: the cap, i.e. until bpf_stats.stop). Rows can be inserted directly,
 * so this is the sidecar's check, whatever bpf_stats.collect checked before.
 *
 * @example
 * validateCollectionRequest({ id: '7', probes: ['query'], duration_s: 2 }, (set) => sidecar.unsupportedReason(set));
 * // { ok: true, id: 7, sets: ['query'], durationMs: 2000 }
 */
export function validateCollectionRequest(row: CollectionRow, unsupportedReason: (set: ProbeSetName) => string | null): CollectionRequest {
  const id = Number(row.id);
  const fail = (error: string): CollectionRequest => ({ ok: false, id, error });
  const probes = row.probes;
  if (!Array.isArray(probes) || probes.length === 0 || probes.length > MAX_PROBES) {
    return fail(`probes must name 1 to ${MAX_PROBES} probe sets`);
  }
  if (probes.some((p) => typeof p !== 'string' || p.length === 0 || p.length > MAX_NAME)) {
    return fail(`probe set names are 1 to ${MAX_NAME} characters`);
  }
  const names = probes as string[];
  const unknown = [...new Set(names.filter((n) => n !== 'default' && !Object.hasOwn(PROBE_SETS, n)))];
  if (unknown.length) {
    return fail(
      `unknown probe set ${unknown.map((n) => JSON.stringify(n)).join(', ')}: known sets are default, ${Object.keys(PROBE_SETS).join(', ')}`,
    );
  }
  const sets = new Set<ProbeSetName>();
  for (const name of names) {
    // 'default' is what `run` attaches: a whereSupported set only where it can run here.
    if (name === 'default')
      for (const s of Object.values(PROBE_SETS)) if (s.default && !(s.whereSupported && unsupportedReason(s.name))) sets.add(s.name);
    if (name !== 'default') sets.add(name as ProbeSetName);
  }
  const unsupported = [...sets].map((s) => [s, unsupportedReason(s)] as const).filter(([, reason]) => reason);
  if (unsupported.length) {
    return fail(unsupported.map(([s, reason]) => `probe set ${s} is not supported here: ${reason}`).join('; '));
  }
  const durationMs = row.duration_s === null || row.duration_s === undefined ? MAX_COLLECTION_MS : Number(row.duration_s) * 1000;
  if (!Number.isFinite(durationMs) || durationMs <= 0 || durationMs > MAX_COLLECTION_MS) {
    return fail(`duration ${row.duration_s} s is out of range: more than 0 and at most ${MAX_COLLECTION_MS / 1000} s (24 hours)`);
  }
  return { ok: true, id, sets: [...sets], durationMs };
}
