/** At most one line per topic per this period (overflow, junk NOTIFYs, connection trouble). */
export const LOG_PERIOD_MS = 60_000;

/**
 * A log that writes at most one line per topic per period and says how many it held back, so
 * a condition that lasts (a full map, a flood of junk NOTIFYs, a connection that keeps failing)
 * is one line a minute, not one per flush or per event. The topic defaults to the line itself.
 *
 * @example
 * const log = rateLimited(console.log);
 * log('queries_full: 12 times since the last such line', 'queries_full');
 */
export function rateLimited(
  log: (line: string) => void,
  periodMs = LOG_PERIOD_MS,
  now: () => number = Date.now,
): (line: string, topic?: string) => void {
  const topics = new Map<string, { loggedAt: number; suppressed: number }>();
  return (line, topic = line) => {
    const t = now();
    const state = topics.get(topic);
    if (state && t - state.loggedAt < periodMs) {
      state.suppressed++;
      return;
    }
    const more = state?.suppressed ? ` (and ${state.suppressed} more such lines held back)` : '';
    log(`${line}${more}`);
    topics.set(topic, { loggedAt: t, suppressed: 0 });
    // Topics are a handful of fixed names; this only guards against a caller passing free text.
    if (topics.size > 1000) topics.clear();
  };
}
