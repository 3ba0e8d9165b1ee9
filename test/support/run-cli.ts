import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { cliPath } from '../../src/package-root.js';

const run = promisify(execFile);

/** What one run of the CLI ended with: its exit code and what it printed. */
export interface CliOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI that package.json's bin names, as a child process with node's own flags, and
 * returns its exit code and output (a non-zero exit is an outcome, not an exception).
 *
 * @example
 * const { code, stderr } = await runCli(['check', '--dsn', cluster.connectionString()]);
 */
export async function runCli(args: string[], timeoutMs = 60_000): Promise<CliOutcome> {
  try {
    const { stdout, stderr } = await run(process.execPath, [cliPath(), ...args], { timeout: timeoutMs });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}
