import { UserError } from '../errors.js';

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000 } as const;
type Unit = keyof typeof UNIT_MS;

/**
 * Parses every duration a command or a bench takes: a number with a unit (ms, s, m or min, h,
 * d), or a bare number in `bareUnit` (milliseconds unless said otherwise). Zero, negative and
 * malformed values are a one-line UserError naming the option; `minMs` sets a floor.
 *
 * @example
 * parseDuration('1.5s', '--interval'); // 1500
 * parseDuration('7d', '--history-retention', { minMs: 1000 }); // 604800000
 * parseDuration('5', '--seconds', { bareUnit: 's' }); // 5000
 */
export function parseDuration(text: string, what: string, options: { bareUnit?: Unit; minMs?: number } = {}): number {
  const match = /^(-?)(\d+(?:\.\d+)?)(ms|s|min|m|h|d)?$/.exec(text.trim());
  if (!match) throw new UserError(`invalid ${what} '${text}': use a number with a unit, e.g. 500ms, 1s, 2m, 12h or 7d`);
  const ms = Number(match[2]) * UNIT_MS[(match[3] ?? options.bareUnit ?? 'ms') as Unit];
  if (match[1] || ms <= 0) throw new UserError(`invalid ${what} '${text}': must be positive`);
  if (options.minMs !== undefined && ms < options.minMs)
    throw new UserError(`invalid ${what} '${text}': must be at least ${options.minMs / 1000}s`);
  return ms;
}

/**
 * node:util parseArgs reads `--interval -5s` as an option missing its value ("argument is
 * ambiguous"): a value that looks like a negative number is joined to its option
 * (`--interval=-5s`), so it reaches parseDuration and gets its own error.
 *
 * @example
 * joinNegativeValues(['run', '--interval', '-5s'], ['interval']); // ['run', '--interval=-5s']
 */
export function joinNegativeValues(argv: readonly string[], valueOptions: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    if (valueOptions.includes(arg.replace(/^--/, '')) && arg.startsWith('--') && next !== undefined && /^-\d/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}
