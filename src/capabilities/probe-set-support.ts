import { setCapabilityReason } from './probe-set-capabilities.js';
import { perfEventsUnsupportedReason } from '../collector/perf-events.js';
import type { SupportContext } from '../families/family.js';
import { PROBE_SETS, type ProbeSetName } from '../families/index.js';

/**
 * THE answer to "can this probe set run here?", for `check`, bpf_stats.capabilities, the
 * validation of bpf_stats.collect() requests and `run` alike: why it cannot, or null. A set
 * whose perf events are all replaced (CollectorObjectOptions.perfEvents) is judged by the
 * replacements; otherwise the set decides from the Postgres, its calibrated layout and the host,
 * after the capabilities it needs beyond the base ones (src/capabilities/probe-set-capabilities.ts);
 * a set whose program the kernel's verifier refused says that refusal.
 *
 * @example
 * probeSetUnsupportedReason('latency', { target, layout: { ...layout, activityStartOffset: null }, perfEvents: {} });
 * // 'query_start/state_change not found side by side in PgBackendStatus (track_activities off?)'
 */
export function probeSetUnsupportedReason(name: ProbeSetName, context: SupportContext): string | null {
  const set = PROBE_SETS[name];
  // The kernel's own answer, once its verifier has seen the set's programs.
  const refused = context.refused?.get(name);
  if (refused) return refused.text;
  // A set this process lacks the privileges for (the uprobe sets without CAP_SYS_ADMIN).
  const privileges = setCapabilityReason(name);
  if (privileges) return privileges;
  const perf = set.attachments.flatMap((a) => (a.kind === 'perf-event' ? [a] : []));
  const replaced = perf.map((a) => context.perfEvents[a.program]);
  if (perf.length && replaced.every((spec) => spec !== undefined)) {
    return perfEventsUnsupportedReason(replaced.flatMap((spec) => (spec ? [spec] : [])));
  }
  return set.unsupportedReason(context);
}
