import { UserError } from '../errors.js';
import type { ProbeSetName } from '../collect/metric-columns.js';
import type { PostmasterTarget } from '../target/postmaster-target.js';
import { LOCK_PROBE_SETS } from './lock-probe-sets.js';

/** One attachment a probe set makes: a program of the collector object and where it goes. */
export type ProbeAttachment =
  | { program: string; kind: 'auto' }
  /** The end of each top-level statement, as discovery located it for this binary. */
  | { program: string; kind: 'statement-end' }
  /** Probes chosen per target: USDT where the build has it, exported functions otherwise. */
  | { kind: 'target'; probes(target: PostmasterTarget): TargetProbe[] };

/** A USDT probe (postgresql provider) or a uprobe/uretprobe on an exported function. */
export type TargetProbe =
  | { program: string; usdt: string }
  | { program: string; symbol: string; retprobe: boolean }
  /** A uprobe at one instruction (file offset), e.g. one call site inside a function. */
  | { program: string; fileOffset: bigint };

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
    description: 'exact call counts: one probe where each top-level statement ends (PortalRun)',
    default: false,
    unsupportedReason: (target) => (target.statementEnd ? null : `${target.binaryPath} exports no PortalRun`),
    attachments: [{ program: 'on_query_done', kind: 'statement-end' }],
    cost: 'one uprobe trap per statement (~4 us; ~5 us as a uretprobe on builds without USDT)',
  },
  ...LOCK_PROBE_SETS,
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
