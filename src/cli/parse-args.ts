import { readFileSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parseProbeSets, PROBE_SETS } from '../families/index.js';
import type { ProbeSetName } from '../families/index.js';
import { UserError } from '../errors.js';
import { joinNegativeValues, parseDuration } from './parse-duration.js';
import { parseRetention } from './parse-retention.js';
import { parseMetricsAddress, type MetricsAddress } from '../exporters/prometheus/metrics-address.js';
import { parseTopOptions, type TopCliOptions } from '../top/top-options.js';
import { DEFAULT_REPORT_LIMIT, type ReportOptions } from '../report/report-command.js';
import { parseNodeName } from '../storage/node-name.js';
import { clientConfig } from '../storage/connection-string.js';

export type CommandName = 'run' | 'demo' | 'check' | 'migrate' | 'top' | 'report' | 'sink-node';
const COMMANDS: readonly CommandName[] = ['run', 'demo', 'check', 'migrate', 'top', 'report', 'sink-node'];

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
  /** run: --history-interval, how often history rows are written (default 5 min). */
  historyIntervalMs?: number;
  /** run: serve Prometheus /metrics here (--metrics-address), with --metrics-top and --metrics-query-text. */
  metrics?: { address: MetricsAddress; top?: number; queryText: boolean; webConfigFile?: string };
  /** top: --iterations, --sort. */
  top?: TopCliOptions;
  /** report: the window, the baseline, --limit, --html. */
  report?: ReportOptions;
  /** run: --postmaster-wait, how long to wait for a restarted postmaster (default 60 s). */
  postmasterWaitMs?: number;
  /** run: --row-retention; absent: the history retention (7 days when history is off). */
  rowRetentionMs?: number;
  /** run, check: --sink, where bpf_stats is written (default: the node's own database). */
  sink?: string;
  /** run, migrate: --node, the node's name in bpf_stats (default: host name and port). */
  node?: string;
  /** sink-node add|remove NODE [--role ROLE]: register a node of a sink (--dsn: the sink, as its owner). */
  sinkNode?: { action: 'add' | 'remove'; node: string; role: string };
}

const OPT_IN_SETS = Object.values(PROBE_SETS)
  .filter((s) => !s.default)
  .map((s) => s.name);

/** "a, b, c" wrapped at `width` columns, continuation lines indented by `indent`. */
function wrapList(items: readonly string[], indent: number, first: number, width = 80): string {
  const lines: string[] = [];
  let line = '';
  for (const item of items) {
    const next = line ? `${line}, ${item}` : item;
    if (line && (lines.length ? indent : first) + next.length + 1 > width) {
      lines.push(`${line},`);
      line = item;
    } else line = next;
  }
  lines.push(line);
  return lines.join(`\n${' '.repeat(indent)}`);
}

// Fits an 80x24 terminal (test/unit/parse-args.test.ts checks it); details live in docs/operations.md#commands.
export const USAGE = `usage: pg-bpf-stats run|check|migrate|demo|top|report [options] (-h, -V)
  run       collect into bpf_stats until SIGTERM (SIGUSR1 pause, SIGUSR2 resume)
  check     what this host and this Postgres support; exit 0 when run can work
  migrate   create/update bpf_stats; sink-node add|remove NODE [--role ROLE]
  demo      a throwaway cluster, a workload, the collector and a report
  top       a live view of the busiest statements and backends, from bpf_stats
  report    --since T|--window A..B --baseline S|--baseline-window C..D --html F
options:
  --dsn DSN | --dsn-file F  connection (PG*); a password only in F, PGPASSWORD
  --interval TIME      flush period, e.g. 1s, 500ms (default 1s)
  --probes SETS        opt-in probe sets, comma separated: ${wrapList(OPT_IN_SETS, 23, 58)}
  --duration TIME      run: stop after TIME; demo: workload length (default 25s)
  --history-retention TIME, --row-retention TIME  run: kept (7d), e.g. 12h, off
  --history-interval TIME    run: one history row per key per TIME (5min)
  --postmaster-wait TIME     run: wait for a restarted postmaster (60s)
  --sink DSN|--sink-file F --node N  run: write bpf_stats into DSN as node N
  --metrics-address [HOST]:PORT (127.0.0.1) --web.config.file F (TLS, auth)  run
  --metrics-top N, --metrics-query-text  run: top N statements (100), their text
  --sort KEY --iterations N  top: by time|cpu|runq|io|lock|lwlock|reclaim|calls
exit codes: 0 ok, 2 configuration or environment (one line says what), 1 a bug
privileges: CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH; the
uprobe sets (query, locks, lwlock, spinlock) also need CAP_SYS_ADMIN`;

/** Parses the command line (without node and script). Throws UserError on bad input. */
export function parseCli(argv: string[]): CliOptions | 'help' | 'version' {
  let parsed;
  try {
    parsed = parseArgs({
      args: joinNegativeValues(argv, ['interval', 'duration', 'history-retention', 'history-interval', 'postmaster-wait', 'row-retention']),
      allowPositionals: true,
      options: {
        dsn: { type: 'string' },
        'dsn-file': { type: 'string' },
        'sink-file': { type: 'string' },
        'web.config.file': { type: 'string' },
        interval: { type: 'string' },
        probes: { type: 'string' },
        duration: { type: 'string' },
        'history-retention': { type: 'string' },
        'history-interval': { type: 'string' },
        'metrics-address': { type: 'string' },
        'metrics-top': { type: 'string' },
        'metrics-query-text': { type: 'boolean' },
        iterations: { type: 'string' },
        sort: { type: 'string' },
        'postmaster-wait': { type: 'string' },
        'row-retention': { type: 'string' },
        sink: { type: 'string' },
        node: { type: 'string' },
        role: { type: 'string' },
        since: { type: 'string' },
        until: { type: 'string' },
        window: { type: 'string' },
        baseline: { type: 'string' },
        'baseline-window': { type: 'string' },
        limit: { type: 'string' },
        html: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'V' },
      },
    });
  } catch (error) {
    throw new UserError((error as Error).message.split('\n')[0]!);
  }
  const { values, positionals } = parsed;
  if (values.help) return 'help';
  if (values.version) return 'version';
  if (positionals.length === 0) return 'help';
  const [command, ...rest] = positionals;
  if (!COMMANDS.includes(command as CommandName)) {
    throw new UserError(`unknown command '${command}': expected one of ${COMMANDS.join(', ')}`);
  }
  const sinkNode = command === 'sink-node' ? parseSinkNode(rest, values.role) : undefined;
  if (values.role !== undefined && command !== 'sink-node') throw new UserError('--role is an option of sink-node add');
  if (rest.length && !sinkNode) throw new UserError(`unexpected argument '${rest[0]}'`);
  if (values['metrics-address'] === undefined && (values['metrics-top'] !== undefined || values['metrics-query-text'])) {
    throw new UserError('--metrics-top and --metrics-query-text need --metrics-address');
  }
  // Which command takes --sink first: a misplaced option is the clearer error than its value's.
  if ((values.sink !== undefined || values['sink-file'] !== undefined) && command !== 'run' && command !== 'check')
    throw new UserError('--sink is an option of run and check');
  const dsn = connectionOption(values.dsn, values['dsn-file'], '--dsn');
  const sink = connectionOption(values.sink, values['sink-file'], '--sink');
  if (values['web.config.file'] !== undefined && values['metrics-address'] === undefined)
    throw new UserError('--web.config.file needs --metrics-address');
  if (values.node !== undefined && command !== 'run' && command !== 'migrate')
    throw new UserError('--node is an option of run and migrate');
  const metricsTop = values['metrics-top'] === undefined ? undefined : parseCount(values['metrics-top'], '--metrics-top');
  if ((values.iterations !== undefined || values.sort !== undefined) && command !== 'top')
    throw new UserError('--iterations and --sort are options of top');
  const reportFlags = (['since', 'until', 'window', 'baseline', 'baseline-window', 'limit', 'html'] as const).filter(
    (f) => values[f] !== undefined,
  );
  if (reportFlags.length && command !== 'report') throw new UserError(`--${reportFlags[0]} is an option of report`);
  return {
    command: command as CommandName,
    dsn,
    intervalMs: values.interval === undefined ? 1000 : parseDuration(values.interval, '--interval'),
    probeSets: values.probes === undefined ? [] : parseProbeSets(values.probes),
    durationMs: values.duration === undefined ? undefined : parseDuration(values.duration, '--duration'),
    ...(values['history-retention'] !== undefined && { historyRetentionMs: parseRetention(values['history-retention']) }),
    ...(values['history-interval'] !== undefined && { historyIntervalMs: parseDuration(values['history-interval'], '--history-interval') }),
    ...(values['metrics-address'] !== undefined && {
      metrics: {
        address: parseMetricsAddress(values['metrics-address']),
        ...(metricsTop !== undefined && { top: metricsTop }),
        queryText: values['metrics-query-text'] ?? false,
        ...(values['web.config.file'] !== undefined && { webConfigFile: values['web.config.file'] }),
      },
    }),
    ...(command === 'top' && { top: parseTopOptions(values.iterations, values.sort) }),
    ...(command === 'report' && {
      report: {
        limit: values.limit === undefined ? DEFAULT_REPORT_LIMIT : parseCount(values.limit, '--limit'),
        ...(values.since !== undefined && { since: values.since }),
        ...(values.until !== undefined && { until: values.until }),
        ...(values.window !== undefined && { window: values.window }),
        ...(values.baseline !== undefined && { baseline: values.baseline }),
        ...(values['baseline-window'] !== undefined && { baselineWindow: values['baseline-window'] }),
        ...(values.html !== undefined && { html: values.html }),
      },
    }),
    ...(values['postmaster-wait'] !== undefined && { postmasterWaitMs: parseDuration(values['postmaster-wait'], '--postmaster-wait') }),
    ...(values['row-retention'] !== undefined && {
      rowRetentionMs: parseDuration(values['row-retention'], '--row-retention', { minMs: 1000 }),
    }),
    ...(sink !== undefined && { sink }),
    ...(values.node !== undefined && { node: parseNodeName(values.node) }),
    ...(sinkNode && { sinkNode }),
  };
}

/** `sink-node add NODE [--role ROLE]` / `sink-node remove NODE`: the role defaults to the node's name. */
function parseSinkNode(args: string[], role: string | undefined): { action: 'add' | 'remove'; node: string; role: string } {
  const [action, node, ...more] = args;
  if ((action !== 'add' && action !== 'remove') || node === undefined || more.length) {
    throw new UserError('usage: pg-bpf-stats sink-node add NODE [--role ROLE] --dsn SINK, or sink-node remove NODE --dsn SINK');
  }
  if (action === 'remove' && role !== undefined) throw new UserError('--role is an option of sink-node add');
  if (role !== undefined && !/^[^\0]{1,63}$/.test(role))
    throw new UserError(`--role ${JSON.stringify(role)}: expected a role name of 1 to 63 characters`);
  return { action, node: parseNodeName(node), role: role ?? node };
}

/** A positive whole number for a flag. */
export function parseCount(text: string, flag: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text)))
    throw new UserError(`${flag} '${text}': expected a whole number of at least 1`);
  return Number(text);
}

/**
 * --dsn or --dsn-file (--sink or --sink-file): the connection string, checked here so that a bad
 * one fails before anything starts. A password never comes from the command line, which every
 * local user can read (ps, /proc/PID/cmdline): --dsn/--sink with one is refused; a file that
 * holds one must be private to its owner, as libpq requires of a password file.
 */
function connectionOption(text: string | undefined, file: string | undefined, flag: string): string | undefined {
  if (text !== undefined && file !== undefined) throw new UserError(`${flag} and ${flag}-file: give one of them`);
  if (file === undefined) {
    if (text !== undefined && typeof clientConfig(text, flag).password === 'string') {
      // Refused rather than taken and scrubbed from argv: /proc/PID/cmdline shows it to every
      // local user from exec until a scrub (node's start, the bundle's load), and whatever
      // started the process (a unit file, a shell's history, a supervisor's log) has it anyway.
      // The message repeats nothing of the string.
      throw new UserError(
        `${flag} holds a password, which every local user can read on the command line: use ${flag}-file (mode 0600), PGPASSWORD or a password file (~/.pgpass, PGPASSFILE) instead`,
      );
    }
    return text;
  }
  let contents: string;
  try {
    contents = readFileSync(file, 'utf8').trim();
  } catch (error) {
    throw new UserError(`${flag}-file ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  if (!contents) throw new UserError(`${flag}-file ${file}: the file is empty (expected a connection string)`);
  const config = clientConfig(contents, `${flag}-file ${file}:`);
  const mode = statSync(file).mode;
  if (typeof config.password === 'string' && (mode & 0o077) !== 0) {
    throw new UserError(
      `${flag}-file ${file} holds a password and group or others can read it (mode ${(mode & 0o777).toString(8)}): chmod 600 it`,
    );
  }
  return contents;
}
