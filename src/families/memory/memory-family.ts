import type { ProgramName } from '../../bpf/contract.js';
import { tracepointOf } from '../../bpf/program-tracepoint.js';
import { defineFamily } from '../family.js';
import { missingTracepoint } from '../missing-tracepoint.js';

/** The reclaim and compaction begin/end programs (their tracepoints are in their ELF sections). */
const MEMORY_PROGRAMS: readonly ProgramName[] = [
  'on_dreclaim_beg',
  'on_dreclaim_end',
  'on_mreclaim_beg',
  'on_mreclaim_end',
  'on_compact_beg',
  'on_compact_end',
];
const MEMORY_TRACEPOINTS = MEMORY_PROGRAMS.map(tracepointOf);

/** Reclaim and compaction stalls a backend suffered. */
export const memoryFamily = defineFamily({
  name: 'memory',
  probeSets: {
    memory: {
      name: 'memory',
      description: 'direct and memcg reclaim stalls and pages reclaimed, direct compaction stalls',
      default: true,
      whereSupported: true,
      unsupportedReason: () => missingTracepoint(MEMORY_TRACEPOINTS),
      attachments: MEMORY_PROGRAMS.map((program) => ({ program, kind: 'auto' as const })),
      cost: 'tp_btf events only when a task reclaims or compacts (none under a cached load)',
    },
  },
  columns: [
    {
      column: 'reclaim_ms',
      field: 'reclaim_ns',
      unit: 'ns',
      measuredBy: ['memory'],
      alreadyCounted: true,
      description:
        'Of which, never add to the partition: milliseconds inside direct or memory-cgroup reclaim, already counted in the partition (mostly as on_cpu_ms). Probe set `memory`; NULL: not measured.',
    },
    {
      column: 'reclaim_pages',
      field: 'reclaim_pages',
      unit: 'count',
      measuredBy: ['memory'],
      description: "Pages reclaimed by this process's direct or memory-cgroup reclaim (count). Probe set `memory`; NULL: not measured.",
    },
    {
      column: 'compaction_stall_ms',
      field: 'compaction_ns',
      unit: 'ns',
      measuredBy: ['memory'],
      alreadyCounted: true,
      description:
        'Of which, never add to the partition: milliseconds stalled in direct memory compaction, already counted in the partition. Probe set `memory`; NULL: not measured.',
    },
  ],
});
