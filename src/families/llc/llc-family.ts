import { PERF_TYPE_HARDWARE, perfEventsUnsupportedReason, type PerfEventSpec } from '../../collector/perf-events.js';
import { defineFamily } from '../family.js';

const PERF_COUNT_HW_CACHE_REFERENCES = 2;
const PERF_COUNT_HW_CACHE_MISSES = 3;

/*
 * The generic cache events, which the kernel maps to the last-level cache on x86 and most
 * arm64 PMUs. Periods keep a busy backend at a few thousand samples per second; each sample
 * adds its period, so the sums stay unbiased estimates.
 */
export const LLC_EVENTS: Record<'on_llc_reference' | 'on_llc_miss', PerfEventSpec> = {
  on_llc_reference: { type: PERF_TYPE_HARDWARE, config: PERF_COUNT_HW_CACHE_REFERENCES, samplePeriod: 100_000, label: 'cache-references' },
  on_llc_miss: { type: PERF_TYPE_HARDWARE, config: PERF_COUNT_HW_CACHE_MISSES, samplePeriod: 10_000, label: 'cache-misses' },
};

/** Last-level cache references and misses, sampled from the hardware PMU. */
export const llcFamily = defineFamily({
  name: 'llc',
  probeSets: {
    llc: {
      name: 'llc',
      description: 'LLC references and misses per backend and query (sampled hardware cache events)',
      default: false,
      unsupportedReason: () => perfEventsUnsupportedReason(Object.values(LLC_EVENTS)),
      attachments: [
        { program: 'on_llc_reference', kind: 'perf-event', event: LLC_EVENTS.on_llc_reference },
        { program: 'on_llc_miss', kind: 'perf-event', event: LLC_EVENTS.on_llc_miss },
      ],
      cost: 'one perf_event program run per sample (every 100000 references / 10000 misses per CPU)',
    },
  },
  columns: [
    {
      column: 'llc_references',
      field: 'llc_references',
      unit: 'count',
      measuredBy: ['llc'],
      description:
        'Last-level cache references (count, sampled: each sample of the hardware event adds its period). Probe set `llc`, which needs a hardware PMU; NULL: not measured.',
    },
    {
      column: 'llc_misses',
      field: 'llc_misses',
      unit: 'count',
      measuredBy: ['llc'],
      description:
        'Last-level cache misses (count, sampled: each sample of the hardware event adds its period). Probe set `llc`, which needs a hardware PMU; NULL: not measured.',
    },
  ],
});
