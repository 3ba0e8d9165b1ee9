import { parseArgs } from 'node:util';
import { parseProbeSets, PROBE_SETS } from '../families/index.js';
import type { ProbeSetName } from '../families/index.js';
import { UserError } from '../errors.js';
import { joinNegativeValues, parseDuration } from './parse-duration.js';
import { parseRetention } from './parse-retention.js';
import { parseMetricsAddress, type MetricsAddress } from '../exporters/prometheus/metrics-address.js';
import { parseTopOptions, type TopCliOptions } from '../top/top-options.js';

export type CommandName = 'run' | 'demo' | 'check' | 'migrate' | 'top';
const COMMANDS: readonly CommandName[] = ['run', 'demo', 'check', 'migrate', 'top'];

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
  /** run: serve Prometheus /metrics here (--metrics-address), with --metrics-top and --metrics-query-text. */
  metrics?: { address: MetricsAddress; top?: number; queryText: boolean };
  /** top: --iterations, --sort. */
  top?: TopCliOptions;
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
  top       a live view of the busiest statements and backends, read from bpf_stats

options:
  --dsn DSN           libpq connection string (default: PG* environment variables)
  --interval TIME     flush period, e.g. 1s, 500ms (default 1s); units ms, s, m/min, h, d
  --probes SETS       opt-in probe sets to attach too, comma separated (${OPT_IN_SETS})
  --duration TIME     run: stop after TIME; demo: workload length (default 25s)
  --history-retention TIME
                      run: keep per-interval history this long, e.g. 7d, 12h, or off (default 7d)
  --metrics-address HOST:PORT
                      run: serve Prometheus /metrics there, e.g. 127.0.0.1:9187
  --metrics-top N     run: per-statement series for the N statements with most time (default 100)
  --metrics-query-text
                      run: export statement text too (pg_bpf_query_info{query=...})
  --iterations N      top: print N screens and exit (default: until q)
  --sort KEY          top: time, cpu, runq, io, lock, lwlock, reclaim or calls (default cpu)
  -h, --help          this text`;

/** Parses the command line (without node and script). Throws UserError on bad input. */
export function parseCli(argv: string[]): CliOptions | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: joinNegativeValues(argv, ['interval', 'duration', 'history-retention']),
      allowPositionals: true,
      options: {
        dsn: { type: 'string' },
        interval: { type: 'string' },
        probes: { type: 'string' },
        duration: { type: 'string' },
        'history-retention': { type: 'string' },
        'metrics-address': { type: 'string' },
        'metrics-top': { type: 'string' },
        'metrics-query-text': { type: 'boolean' },
        iterations: { type: 'string' },
        sort: { type: 'string' },
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
  if (values['metrics-address'] === undefined && (values['metrics-top'] !== undefined || values['metrics-query-text'])) {
    throw new UserError('--metrics-top and --metrics-query-text need --metrics-address');
  }
  const metricsTop = values['metrics-top'] === undefined ? undefined : parseCount(values['metrics-top'], '--metrics-top');
  if ((values.iterations !== undefined || values.sort !== undefined) && command !== 'top') throw new UserError('--iterations and --sort are options of top');
  return {
    command: command as CommandName,
    dsn: values.dsn,
    intervalMs: values.interval === undefined ? 1000 : parseDuration(values.interval, '--interval'),
    probeSets: values.probes === undefined ? [] : parseProbeSets(values.probes),
    durationMs: values.duration === undefined ? undefined : parseDuration(values.duration, '--duration'),
    ...(values['history-retention'] !== undefined && { historyRetentionMs: parseRetention(values['history-retention']) }),
    ...(values['metrics-address'] !== undefined && {
      metrics: { address: parseMetricsAddress(values['metrics-address']), ...(metricsTop !== undefined && { top: metricsTop }), queryText: values['metrics-query-text'] ?? false },
    }),
    ...(command === 'top' && { top: parseTopOptions(values.iterations, values.sort) }),
  };
}

/** A positive whole number for a flag. */
export function parseCount(text: string, flag: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) throw new UserError(`${flag} '${text}': expected a whole number of at least 1`);
  return Number(text);
}
