import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/cli/logger.js';

function sink(isTTY: boolean) {
  let text = '';
  return {
    isTTY,
    write: (t: string) => (text += t),
    get text() {
      return text;
    },
  };
}

describe('createLogger', () => {
  const at = () => new Date('2025-01-31T12:00:00.000Z');

  it('writes plain lines on a terminal', () => {
    const out = sink(true);
    const log = createLogger(out, at);
    log.info('attached probe sets: cpu');
    log.warn('probe set io is not supported here');
    log.error('cannot connect');
    expect(out.text).toBe(
      'pg-bpf-stats: attached probe sets: cpu\npg-bpf-stats: warning: probe set io is not supported here\npg-bpf-stats: error: cannot connect\n',
    );
  });

  it('stamps each line with an ISO 8601 time and its level elsewhere', () => {
    const out = sink(false);
    const log = createLogger(out, at);
    log.info('attached probe sets: cpu');
    log.error('internal error: boom\n    at x');
    expect(out.text).toBe(
      '2025-01-31T12:00:00.000Z INFO  attached probe sets: cpu\n2025-01-31T12:00:00.000Z ERROR internal error: boom\n2025-01-31T12:00:00.000Z ERROR     at x\n',
    );
  });
});
