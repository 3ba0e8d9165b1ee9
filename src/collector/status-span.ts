import { StatusSpanBound } from '../bpf/contract.js';
import type { StatusLayout } from '../postmaster/postmaster-target.js';

/** The longest span BPF reads in one go (bpf/pg-status.bpf.h). */
export const STATUS_SPAN_MAX = StatusSpanBound.STATUS_SPAN_MAX;

/** A byte range of PgBackendStatus that BPF copies with one user read. */
export interface StatusSpan {
  offset: number;
  /** 0: no span; BPF reads st_query_id alone and the wait event for every sleep. */
  length: number;
}

/**
 * The range covering st_query_id and st_state, read at every context switch of a backend: each
 * user read costs about the same whatever its size, and the state saves the wait-event read
 * when an idle backend waits for its client. No span when either offset is unknown or they are
 * further apart than STATUS_SPAN_MAX.
 *
 * @example
 * statusSpan({ ...layout, stateOffset: 232, queryIdOffset: 440 }); // { offset: 232, length: 216 }
 */
export function statusSpan(layout: Pick<StatusLayout, 'queryIdOffset' | 'stateOffset'>): StatusSpan {
  const { queryIdOffset, stateOffset } = layout;
  if (queryIdOffset === null || stateOffset === null) return { offset: 0, length: 0 };
  const offset = Math.min(queryIdOffset, stateOffset);
  const length = Math.max(queryIdOffset + 8, stateOffset + 4) - offset;
  return length <= STATUS_SPAN_MAX ? { offset, length } : { offset: 0, length: 0 };
}
