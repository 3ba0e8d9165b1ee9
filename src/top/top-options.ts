import { UserError } from '../errors.js';
import { TOP_METRICS, type TopMetric } from './top-read.js';

export interface TopCliOptions {
  iterations?: number;
  sort: TopMetric;
}

/** `top --iterations N --sort KEY`; bad values are a UserError naming the flag. */
export function parseTopOptions(iterations: string | undefined, sort: string | undefined): TopCliOptions {
  const metric = (sort ?? 'cpu') === 'time' ? 'total' : (sort ?? 'cpu');
  if (!TOP_METRICS.includes(metric as TopMetric)) {
    throw new UserError(`--sort '${sort}': expected one of time, cpu, runq, io, lock, lwlock, reclaim, calls`);
  }
  if (iterations !== undefined && (!/^\d+$/.test(iterations) || Number(iterations) < 1))
    throw new UserError(`--iterations '${iterations}': expected a whole number of at least 1`);
  return { sort: metric as TopMetric, ...(iterations !== undefined && { iterations: Number(iterations) }) };
}
