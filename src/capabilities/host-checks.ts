import { existsSync } from 'node:fs';
import { collectorObjectPath } from '../collector/collector-object.js';
import { oneLine, UserError } from '../errors.js';
import { loadNative } from '../native/bpf-native.js';
import type { ProbeSetName } from '../families/index.js';
import {
  BASE_CAPABILITIES,
  type CapabilityName,
  effectiveCapabilities,
  MissingCapabilities,
  missingCapabilities,
  missingCapabilityLine,
} from './linux-capabilities.js';
import { missingSetCapabilities } from './probe-set-capabilities.js';

/** One host requirement and whether it holds. */
export interface HostCheck {
  name: string;
  ok: boolean;
  detail: string;
}

/**
 * What the collector needs from the host before touching Postgres. Privileges are judged by
 * the effective capability set, not by the uid: root without CAP_BPF (a container) cannot run
 * it, and a service user holding the capabilities can. One 'privileges' line per missing one.
 */
export function hostChecks(host: { capEff?: bigint; btfPath?: string } = {}): HostCheck[] {
  const missing = missingCapabilities(BASE_CAPABILITIES, host.capEff ?? effectiveCapabilities());
  const btf = existsSync(host.btfPath ?? '/sys/kernel/btf/vmlinux');
  return [
    installCheck(),
    ...(missing.length
      ? missing.map((name) => ({ name: 'privileges', ok: false, detail: missingCapabilityLine(name) }))
      : [{ name: 'privileges', ok: true, detail: `effective capabilities include ${BASE_CAPABILITIES.join(', ')}` }]),
    {
      name: 'btf',
      ok: btf,
      detail: btf
        ? '/sys/kernel/btf/vmlinux present'
        : 'no BTF: this kernel lacks /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF=y is required)',
    },
  ];
}

/** The package's own parts: the native addon (loadable: its libraries are there) and the BPF object. */
function installCheck(): HostCheck {
  try {
    loadNative();
    return { name: 'install', ok: true, detail: `native addon and ${collectorObjectPath()}` };
  } catch (error) {
    return { name: 'install', ok: false, detail: oneLine(error) };
  }
}

/**
 * Refuses, before anything is connected or created, when the host lacks what `run` needs: a
 * capability every run needs, one a requested opt-in set needs (each on its own line), or BTF.
 */
export function assertHostReady(requestedSets: readonly ProbeSetName[] = [], capEff: bigint = effectiveCapabilities()): void {
  const checks = hostChecks({ capEff });
  const lines = checks.filter((c) => c.name === 'privileges' && !c.ok).map((c) => c.detail);
  const bySet = new Map<CapabilityName, ProbeSetName[]>();
  for (const set of requestedSets) {
    for (const name of missingSetCapabilities(set, capEff)) bySet.set(name, [...(bySet.get(name) ?? []), set]);
  }
  for (const [name, sets] of bySet) {
    lines.push(missingCapabilityLine(name, `probe set${sets.length > 1 ? 's' : ''} ${sets.join(', ')}`, sets.length > 1));
  }
  if (lines.length) throw new MissingCapabilities(lines);
  const failed = checks.find((c) => !c.ok); // the install, then BTF
  if (failed) throw new UserError(failed.detail);
}
