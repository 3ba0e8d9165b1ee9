import { parseArgs } from 'node:util';
import { parseProbeSets, PROBE_SETS } from '../families/index.js';
import type { ProbeSetName } from '../families/index.js';
import { UserError } from '../errors.js';
import { joinNegativeValues, parseDuration } from './parse-duration.js';
import { parseRetention } from './parse-retention.js';

export type CommandName = 'run' | 'demo' | 'check' | 'migrate';
const COMMANDS: readonly CommandName[] = ['run', 'demo', 'check', 'migrate'];

export interface CliOptions {
  command: CommandName;
  /** undefined: the libpq PG* environment variables. */
  dsn: string | undefined;
  intervalMs: number;
  probeSets: ProbeSetName[];
  /** run: stop after this long (default: until SIGINT/SIGTERM). demo: workload length. */
  durationMs: number | undefined;
  /** run: --history-retention; null: off; absent: the default (7 days). */
  historyRetentionMs?: number | null;
  /** run: --row-retention; absent: the history retention (7 days when history is off). */
  rowRetentionMs?: number;
}

const OPT_IN_SETS = Object.values(PROBE_SETS)
  .filter((s) => !s.default)
  .map((s) => s.name)
  .join(', ');

export const USAGE = `usage: pg-bpf-stats <command> [options]

commands:
  run       collect: attach BPF to the postmaster behind the connection and fill bpf_stats
  demo      a throwaway cluster, a workload, the collector and a report; cleans up after itself
  check     what this host and this Postgres support, one line per probe family
  migrate   create or update the bpf_stats schema only

options:
  --dsn DSN           libpq connection string (default: PG* environment variables)
  --interval TIME     flush period, e.g. 1s, 500ms (default 1s); units ms, s, m/min, h, d
  --probes SETS       opt-in probe sets to attach too, comma separated (${OPT_IN_SETS})
  --duration TIME     run: stop after TIME; demo: workload length (default 25s)
  --history-retention TIME
                      run: keep per-interval history this long, e.g. 7d, 12h, or off (default 7d)
  --row-retention TIME
                      run: keep rows of exited backends, finished requests and stopped
                      collectors this long (default: the history retention, 7d when off)
  -h, --help          this text`;

/** Parses the command line (without node and script). Throws UserError on bad input. */
export function parseCli(argv: string[]): CliOptions | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: joinNegativeValues(argv, ['interval', 'duration', 'history-retention', 'row-retention']),
      allowPositionals: true,
      options: {
        dsn: { type: 'string' },
        interval: { type: 'string' },
        probes: { type: 'string' },
        duration: { type: 'string' },
        'history-retention': { type: 'string' },
        'row-retention': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UserError((error as Error).message.split('\n')[0]!);
  }
  const { values, positionals } = parsed;
  if (values.help || positionals.length === 0) return 'help';
  const [command, ...rest] = positionals;
  if (!COMMANDS.includes(command as CommandName)) {
    throw new UserError(`unknown command '${command}': expected one of ${COMMANDS.join(', ')}`);
  }
  if (rest.length) throw new UserError(`unexpected argument '${rest[0]}'`);
  return {
    command: command as CommandName,
    dsn: values.dsn,
    intervalMs: values.interval === undefined ? 1000 : parseDuration(values.interval, '--interval'),
    probeSets: values.probes === undefined ? [] : parseProbeSets(values.probes),
    durationMs: values.duration === undefined ? undefined : parseDuration(values.duration, '--duration'),
    ...(values['history-retention'] !== undefined && { historyRetentionMs: parseRetention(values['history-retention']) }),
    ...(values['row-retention'] !== undefined && { rowRetentionMs: parseDuration(values['row-retention'], '--row-retention', { minMs: 1000 }) }),
  };
}
