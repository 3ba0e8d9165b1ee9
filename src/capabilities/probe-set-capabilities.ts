import type { ProbeAttachment } from '../collector/probe-attachment.js';
import { PROBE_SETS, type ProbeSetName } from '../families/index.js';
import { type CapabilityName, effectiveCapabilities, missingCapabilities, missingCapabilityLine } from './linux-capabilities.js';

/**
 * What one attachment needs beyond the capabilities every run has (BASE_CAPABILITIES).
 * uprobes and USDT probes (a uprobe at each site) go through the perf uprobe PMU, which asks
 * for CAP_SYS_ADMIN: measured, CAP_PERFMON alone gets EACCES from perf_event_open, per
 * process and system wide alike (README, "Running without root").
 */
function attachmentCapabilities(attachment: ProbeAttachment): CapabilityName[] {
  switch (attachment.kind) {
    case 'statement-end':
    case 'target':
      return ['CAP_SYS_ADMIN'];
    case 'auto':
    case 'switch':
    case 'perf-event':
      return [];
  }
}

/** The capabilities a probe set needs beyond the base ones (e.g. CAP_SYS_ADMIN for the uprobe sets). */
export function setCapabilities(name: ProbeSetName): CapabilityName[] {
  return [...new Set(PROBE_SETS[name].attachments.flatMap(attachmentCapabilities))];
}

/** The capabilities of setCapabilities(name) this process lacks. */
export function missingSetCapabilities(name: ProbeSetName, capEff: bigint = effectiveCapabilities()): CapabilityName[] {
  return missingCapabilities(setCapabilities(name), capEff);
}

/**
 * Why this process cannot attach the set for lack of a capability, or null. Part of the one
 * answer to "can it run here?" (probeSetUnsupportedReason).
 */
export function setCapabilityReason(name: ProbeSetName, capEff: bigint = effectiveCapabilities()): string | null {
  const missing = missingSetCapabilities(name, capEff)[0];
  return missing ? missingCapabilityLine(missing, `probe set ${name}`) : null;
}
