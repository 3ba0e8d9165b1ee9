import { HistSwitch } from '../../bpf/contract.js';
import { defineFamily } from '../family.js';

/** Statement latency histograms, read from PgBackendStatus when a backend goes idle. */
export const latencyFamily = defineFamily({
  name: 'latency',
  probeSets: {
    latency: {
      name: 'latency',
      description: 'statement latency histograms (query_start .. state_change, read when a backend goes idle)',
      // Opt-in: +0.1-0.2 us of BPF time per pgbench -S transaction (bench/histogram-cost.ts), a
      // third more than the cpu set's own, which is over its overhead budget already.
      default: false,
      unsupportedReason: ({ layout }) =>
        layout === null
          ? 'the PgBackendStatus layout could not be calibrated here'
          : layout.activityStartOffset === null
            ? 'query_start/state_change not found side by side in PgBackendStatus (track_activities off?)'
            : null,
      attachments: [
        { program: 'on_sched_switch', kind: 'switch', bit: HistSwitch.HIST_SWITCH_LATENCY },
        // A session's last statement, when the backend exits without going idle on a switch-out.
        { program: 'on_backend_exit', kind: 'auto' },
      ],
      cost: 'inside the cpu set: a 24-byte user read per ClientRead sleep or preemption, a histogram update per statement (~0.1-0.2 us of BPF time per pgbench -S transaction)',
    },
  },
  columns: [],
});
