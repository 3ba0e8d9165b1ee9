import type { FlushStatus, Sidecar } from '../src/sidecar/sidecar.js';
import { median } from './report.js';

/** One flush of an in-process sidecar (lazy: as its timer flushes); a failed flush ends the bench. */
export async function flushOrThrow(sidecar: Sidecar, lazy = false): Promise<FlushStatus> {
  const status = await sidecar.flush({ lazy });
  if (status.error) throw new Error(status.error);
  return status;
}

/** Medians of a flush's phases (FlushStatus.phases; building is the rest of its time). */
export interface PhaseMedians {
  readMs: number;
  buildMs: number;
  statementMs: number;
}

/**
 * `repeat` rounds of `work` followed by one timed flush (Sidecar.flush()'s own time: reading the
 * maps, preparing, the statement's round trip): every time, their median, the last status, and
 * the median of each phase (reading the maps; building rows and statement; the statement).
 *
 * @example
 * const { ms, last } = await timedFlushes(5, () => runStatements(client, 100), () => flushOrThrow(sidecar));
 */
export async function timedFlushes(
  repeat: number,
  work: () => Promise<unknown>,
  flush: () => Promise<FlushStatus>,
): Promise<{ times: number[]; ms: number; last: FlushStatus; phases: PhaseMedians }> {
  const times: number[] = [];
  const reads: number[] = [];
  const statements: number[] = [];
  const builds: number[] = [];
  let last: FlushStatus | undefined;
  for (let i = 0; i < repeat; i++) {
    await work();
    last = await flush();
    times.push(last.ms);
    const { readMs = 0, statementMs = 0 } = last.phases ?? {};
    reads.push(readMs);
    statements.push(statementMs);
    builds.push(last.ms - readMs - statementMs);
  }
  if (!last) throw new Error('timedFlushes: repeat must be at least 1');
  return { times, ms: median(times), last, phases: { readMs: median(reads), buildMs: median(builds), statementMs: median(statements) } };
}
