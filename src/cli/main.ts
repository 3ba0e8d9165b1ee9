// The CLI's commands and exit codes. The package runs it bundled, through src/cli/launcher.ts.
import { MissingCapabilities } from '../capabilities/linux-capabilities.js';
import { databaseFailure, UserError, oneLine } from '../errors.js';
import { checkCommand } from './check-command.js';
import { createLogger } from './logger.js';
import { migrateCommand } from './migrate-command.js';
import { parseCli, USAGE } from './parse-args.js';
import { runCommand } from './run-command.js';
import { sinkNodeCommand } from './sink-node-command.js';
import { demoCommand } from '../demo/demo-command.js';
import { packageVersion } from './version.js';
import { topCommand } from '../top/top-command.js';
import { reportCommand } from '../report/report-command.js';

/*
 * Exit codes, for a service manager (the systemd unit's RestartPreventExitStatus=2):
 *   0  done (run: stopped by SIGINT/SIGTERM or --duration; check: the sidecar can run here)
 *   2  configuration or environment: bad input, a missing capability, no BTF, Postgres
 *      unreachable or gone, ... - one line says what; restarting will not help
 *   1  a bug in pg-bpf-stats (the stack trace follows): anything else
 */
const logger = createLogger(process.stderr);
const log = logger.info;

/** What the launcher (src/cli/launcher.ts) hands the CLI. */
export interface CliHooks {
  /** Called once `run` is collecting, its start's functions compiled: saves V8's code cache (code-cache.ts); a line for the log, or null. */
  started?: () => string | null;
  /** Why a file at the code cache's path was refused (a FIFO, a link, another user's), or null. */
  cacheRefused?: string | null;
}

async function main(argv: string[], hooks: CliHooks): Promise<number> {
  // Before parsing, so that even --help says it: someone may have planted the file.
  if (hooks.cacheRefused) logger.warn(hooks.cacheRefused);
  const options = parseCli(argv);
  if (options === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (options === 'version') {
    process.stdout.write(`pg-bpf-stats ${packageVersion()}\n`);
    return 0;
  }
  switch (options.command) {
    case 'run':
      return runCommand(options, log, () => {
        const line = hooks.started?.();
        if (line) log(line);
      });
    case 'demo':
      return demoCommand(options, (line) => process.stdout.write(`${line}\n`));
    case 'check':
      return checkCommand(options, (line) => process.stdout.write(`${line}\n`));
    case 'migrate':
      return migrateCommand(options, log);
    case 'top':
      return topCommand({ dsn: options.dsn, intervalMs: options.intervalMs, ...options.top! });
    case 'report':
      return reportCommand(options.dsn, options.report!, (line) => process.stdout.write(`${line}\n`));
    case 'sink-node':
      return sinkNodeCommand(options, log);
  }
}

/** Runs the command `argv` names and exits with its code. */
export function runCli(argv: string[], hooks: CliHooks = {}): void {
  main(argv, hooks).then(
    (code) => process.exit(code),
    (error: unknown) => {
      // Expected failures (environment, input) are one line each; anything else is a bug: keep the stack.
      if (error instanceof MissingCapabilities) {
        for (const line of error.lines) logger.error(line);
        process.exit(error.exitCode);
      }
      if (error instanceof UserError) {
        logger.error(oneLine(error));
        process.exit(error.exitCode);
      }
      const fromDatabase = databaseFailure(error);
      if (fromDatabase) {
        logger.error(fromDatabase);
        process.exit(2);
      }
      logger.error(
        `internal error (a bug in pg-bpf-stats, please report it): ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
      );
      process.exit(1);
    },
  );
}
