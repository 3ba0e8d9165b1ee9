import { PROBE_SETS } from '../families/index.js';
import type { ProbeSetName } from '../families/index.js';
import { oneLine } from '../errors.js';
import type { Sidecar } from '../sidecar/sidecar.js';

/**
 * Attaches every probe set this host and this Postgres support that is not attached yet (the
 * demo shows every family it can). Returns, per set left out, why: the object's own verdict
 * ('unsupported: ...'), or the error attaching it raised ('attach failed: ...').
 *
 * @example
 * const missing = attachSupportedSets(sidecar); // { llc: 'unsupported: no hardware PMU (...)' }
 */
export function attachSupportedSets(sidecar: Sidecar): Partial<Record<ProbeSetName, string>> {
  const missing: Partial<Record<ProbeSetName, string>> = {};
  for (const name of Object.keys(PROBE_SETS) as ProbeSetName[]) {
    if (sidecar.attached().includes(name)) continue;
    const reason = sidecar.unsupportedReason(name);
    if (reason) {
      missing[name] = `unsupported: ${reason}`;
      continue;
    }
    try {
      sidecar.attach(name);
    } catch (error) {
      missing[name] = `attach failed: ${oneLine(error)}`;
    }
  }
  return missing;
}
