import { UserError } from '../errors.js';
import type { ProbeSetName } from '../collect/metric-columns.js';
import type { PostmasterTarget } from '../target/postmaster-target.js';

/** One attachment a probe set makes: a program of the collector object and where it goes. */
export type ProbeAttachment =
  | { program: string; kind: 'auto' }
  | { program: string; kind: 'usdt'; provider: string; name: string };

export interface ProbeSet {
  name: ProbeSetName;
  description: string;
  /** Always attached by `run`; the others are opt-in. */
  default: boolean;
  /** Why this set cannot run against `target`, or null when it can. */
  unsupportedReason(target: PostmasterTarget): string | null;
  attachments: ProbeAttachment[];
  /** Measured cost, for `check` and the docs (bench/overhead.ts). */
  cost: string;
}

/*
 * query__execute__done fires at the end of every PortalRun: once per top-level statement in
 * both the simple and the extended protocol (query__done fires too, but only for simple-protocol
 * messages, and would count those twice).
 */
const QUERY_DONE_PROBES = ['query__execute__done'];

export const PROBE_SETS: Record<ProbeSetName, ProbeSet> = {
  cpu: {
    name: 'cpu',
    description: 'on-CPU, run-queue and off-CPU wait time, context switches, migrations, page faults',
    default: true,
    unsupportedReason: () => null,
    attachments: [{ program: 'on_sched_switch', kind: 'auto' }],
    cost: 'one tp_btf sched_switch event per backend context switch',
  },
  query: {
    name: 'query',
    description: 'exact call counts from the USDT probe query__execute__done',
    default: false,
    unsupportedReason: (target) => {
      const have = new Set(target.usdt.filter((n) => n.provider === 'postgresql').map((n) => n.name));
      const missing = QUERY_DONE_PROBES.filter((p) => !have.has(p));
      return missing.length
        ? `${target.binaryPath} has no USDT probe postgresql:${missing.join(', postgresql:')} (built without --enable-dtrace)`
        : null;
    },
    attachments: QUERY_DONE_PROBES.map((name) => ({ program: 'on_query_done', kind: 'usdt', provider: 'postgresql', name })),
    cost: 'one uprobe trap (~4 us) per query',
  },
};

/**
 * Validates probe set names given by a user (CLI flag or SQL request).
 *
 * @example
 * parseProbeSets('cpu,query'); // ['cpu', 'query']
 */
export function parseProbeSets(input: string | readonly string[]): ProbeSetName[] {
  const names = (typeof input === 'string' ? input.split(',') : [...input]).map((s) => s.trim()).filter(Boolean);
  const unknown = names.filter((n) => !(n in PROBE_SETS));
  if (unknown.length) {
    throw new UserError(`unknown probe set ${unknown.join(', ')}: known sets are ${Object.keys(PROBE_SETS).join(', ')}`);
  }
  return [...new Set(names)] as ProbeSetName[];
}
