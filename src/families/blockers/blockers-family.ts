import { hostPercpuOffsets } from '../../postmaster/kernel-percpu.js';
import { defineFamily } from '../family.js';
import { WaitEventNames } from '../waits/wait-event-names.js';
import { WaitBlockersPart } from './wait-blockers-part.js';

/**
 * Who ended each wait (opt-in set "blockers"): the process that woke a sleeping backend, by its
 * backend type and the query it was on, per (query, wait event): bpf_stats.query_wait_blockers.
 * One tracepoint program (sched_waking, in the waker's context) and one compare in the cpu set's
 * switch-out, which adds each woken sleep to its waker (bpf/wait-blockers.bpf.h).
 */
export const blockersFamily = defineFamily({
  name: 'blockers',
  probeSets: {
    blockers: {
      name: 'blockers',
      description: 'who woke each wait: the waker process (backend type, query key) per query and wait event (sched_waking)',
      default: false,
      unsupportedReason: () => null,
      attachments: [{ program: 'on_sched_waking', kind: 'auto' }],
      cost: "a tracepoint on every wake-up on the host (filtered to the postmaster in a few loads), a user read of the waker's query id per woken wait, a map update per woken wait (docs/measured.md#cost-of-each-probe-set)",
    },
  },
  columns: [],
  // Where this CPU's preempt count is, from its run queue (bpf/wait-blockers.bpf.h); both or neither.
  rodata: () => {
    const offsets = hostPercpuOffsets(['runqueues', '__preempt_count']);
    const runqueues = offsets.get('runqueues');
    const preemptCount = offsets.get('__preempt_count');
    if (runqueues === undefined || preemptCount === undefined) return {};
    return { runqueues_percpu_off: runqueues, preempt_count_percpu_off: preemptCount };
  },
  flushPart: ({ target, trancheNames, lookupAndDelete, log }) =>
    new WaitBlockersPart(
      new WaitEventNames(target.majorVersion, trancheNames),
      target.majorVersion,
      lookupAndDelete && ((keys) => lookupAndDelete('query_wait_blockers', keys)),
      log,
    ),
});
