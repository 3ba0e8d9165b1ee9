import { defineFamily } from '../family.js';
import { missingTracepoint } from '../missing-tracepoint.js';

/** Program of each memory tracepoint. */
const MEMORY_PROGRAMS: Record<string, string> = {
  mm_vmscan_direct_reclaim_begin: 'on_dreclaim_beg',
  mm_vmscan_direct_reclaim_end: 'on_dreclaim_end',
  mm_vmscan_memcg_reclaim_begin: 'on_mreclaim_beg',
  mm_vmscan_memcg_reclaim_end: 'on_mreclaim_end',
  mm_compaction_begin: 'on_compact_beg',
  mm_compaction_end: 'on_compact_end',
};
const MEMORY_TRACEPOINTS = Object.keys(MEMORY_PROGRAMS);

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
      attachments: MEMORY_TRACEPOINTS.map((tp) => ({ program: MEMORY_PROGRAMS[tp]!, kind: 'auto' as const })),
      cost: 'tp_btf events only when a task reclaims or compacts (none under a cached load)',
    },
  },
  columns: [
    { column: 'reclaim_ms', field: 'reclaim_ns', unit: 'ns', measuredBy: ['memory'] },
    { column: 'reclaim_pages', field: 'reclaim_pages', unit: 'count', measuredBy: ['memory'] },
    { column: 'compaction_stall_ms', field: 'compaction_ns', unit: 'ns', measuredBy: ['memory'] },
  ],
});
