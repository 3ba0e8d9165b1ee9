import { readFileSync } from 'node:fs';

/**
 * A process's on-CPU time so far, in ms, as the scheduler keeps it (/proc/<pid>/schedstat,
 * first field: sum_exec_runtime in ns). Ground truth for on-CPU figures that does not depend
 * on how loaded the machine is, unlike wall-clock execution times.
 */
export function cpuTimeMs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
}
