#!/usr/bin/env node
import { UserError, oneLine } from '../errors.js';
import { checkCommand } from './check-command.js';
import { migrateCommand } from './migrate-command.js';
import { parseCli, USAGE } from './parse-args.js';
import { runCommand } from './run-command.js';
import { demoCommand } from '../demo/demo-command.js';
import { topCommand } from '../top/top-command.js';

const log = (line: string) => process.stderr.write(`pg-bpf-stats: ${line}\n`);

async function main(argv: string[]): Promise<number> {
  const options = parseCli(argv);
  if (options === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  switch (options.command) {
    case 'run':
      return runCommand(options, log);
    case 'demo':
      return demoCommand(options, (line) => process.stdout.write(`${line}\n`));
    case 'check':
      return checkCommand(options, (line) => process.stdout.write(`${line}\n`));
    case 'migrate':
      return migrateCommand(options, log);
    case 'top':
      return topCommand({ dsn: options.dsn, intervalMs: options.intervalMs, ...options.top! });
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    // Expected failures (environment, input) are one line; anything else is a bug: keep the stack.
    if (error instanceof UserError) {
      log(`error: ${oneLine(error)}`);
      process.exit(error.exitCode);
    }
    if (isServerError(error)) {
      log(`error: PostgreSQL said: ${oneLine(error)}`);
      process.exit(2);
    }
    log(`internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);

/** An error reported by the server (permissions, missing objects, shutdown), not by us. */
function isServerError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'severity' in error && 'code' in error;
}
