/** How serious a log line is. */
export type LogLevel = 'info' | 'warn' | 'error';

export interface Logger {
  info(line: string): void;
  warn(line: string): void;
  error(line: string): void;
}

/**
 * The CLI's log lines on `stream` (stderr). On a terminal they are plain
 * ("pg-bpf-stats: error: ..."); anywhere else (a service manager, a pipe, a file) each line
 * starts with an ISO 8601 timestamp and its level, "2025-01-31T12:00:00.000Z ERROR ...", so a
 * journal or a log shipper can order and filter them. Multi-line text (a stack trace) keeps
 * one record per line, each stamped alike.
 *
 * @example
 * const log = createLogger(process.stderr);
 * log.info('attached probe sets: cpu');
 */
export function createLogger(stream: { isTTY?: boolean; write(text: string): unknown }, now: () => Date = () => new Date()): Logger {
  const tty = stream.isTTY === true;
  const write = (level: LogLevel, text: string) => {
    const lines = text.split('\n');
    if (tty) {
      const tag = level === 'info' ? '' : `${level === 'warn' ? 'warning' : 'error'}: `;
      stream.write(lines.map((l) => `pg-bpf-stats: ${tag}${l}\n`).join(''));
    } else {
      const stamp = `${now().toISOString()} ${level.toUpperCase().padEnd(5)}`;
      stream.write(lines.map((l) => `${stamp} ${l}\n`).join(''));
    }
  };
  return { info: (l) => write('info', l), warn: (l) => write('warn', l), error: (l) => write('error', l) };
}
