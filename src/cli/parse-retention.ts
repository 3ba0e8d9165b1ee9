import { UserError } from '../errors.js';

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * Parses --history-retention: a duration with a unit (s, m, h, d; at least 1 s), or `off`
 * (null: no history is written).
 *
 * @example
 * parseRetention('7d'); // 604800000
 * parseRetention('off'); // null
 */
export function parseRetention(text: string): number | null {
  const trimmed = text.trim();
  if (trimmed === 'off') return null;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(trimmed);
  if (!match) throw new UserError(`invalid --history-retention '${text}': use e.g. 7d, 12h, 30m or off`);
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (ms < 1000) throw new UserError(`invalid --history-retention '${text}': must be at least 1s (or off)`);
  return ms;
}
