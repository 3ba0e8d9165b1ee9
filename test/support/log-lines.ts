/**
 * The messages of a run's stderr, as the CLI logs them off a terminal
 * (`<ISO time> <LEVEL> <message>`), without time and level: what a test asserts on.
 *
 * @example
 * logMessages('2026-11-23T06:08:17.064Z ERROR no bpf_stats here\n'); // ['no bpf_stats here']
 */
export function logMessages(stderr: string, level = 'ERROR'): string[] {
  return stderr
    .trim()
    .split('\n')
    .map((line) => new RegExp(`^\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z ${level} (.*)$`).exec(line)?.[1] ?? `(not a ${level} line) ${line}`);
}
