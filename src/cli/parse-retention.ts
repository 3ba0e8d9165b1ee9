import { parseDuration } from './parse-duration.js';

/**
 * Parses --history-retention: a duration (at least 1 s; see parseDuration), or `off` (null: no
 * history is written).
 *
 * @example
 * parseRetention('7d'); // 604800000
 * parseRetention('off'); // null
 */
export function parseRetention(text: string): number | null {
  if (text.trim() === 'off') return null;
  return parseDuration(text, '--history-retention', { minMs: 1000 });
}
