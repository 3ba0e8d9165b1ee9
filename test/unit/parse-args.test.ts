import { describe, expect, it } from 'vitest';
import { parseCli, USAGE } from '../../src/cli/parse-args.js';
import { parseDuration } from '../../src/cli/parse-duration.js';
import { UserError } from '../../src/errors.js';

describe('parseDuration', () => {
  it('reads milliseconds, seconds, minutes, hours and days', () => {
    expect(parseDuration('250', 'x')).toBe(250);
    expect(parseDuration('2min', 'x')).toBe(120_000);
    expect(parseDuration('1h', 'x')).toBe(3_600_000);
    expect(parseDuration('1d', 'x')).toBe(86_400_000);
    expect(parseDuration('5', 'x', { bareUnit: 's' })).toBe(5000);
    expect(parseDuration('250ms', 'x')).toBe(250);
    expect(parseDuration('1.5s', 'x')).toBe(1500);
    expect(parseDuration('2m', 'x')).toBe(120_000);
  });

  it('rejects garbage, zero and negative values with the flag name', () => {
    for (const bad of ['', 'soon', '-1s', '0', '1 s s', '1w']) {
      expect(() => parseDuration(bad, '--interval')).toThrow(/--interval/);
    }
  });
});

describe('parseCli', () => {
  it('parses run with every option', () => {
    expect(parseCli(['run', '--dsn', 'postgresql://x/y', '--interval', '2s', '--probes', 'query', '--duration', '10s'])).toEqual({
      command: 'run',
      dsn: 'postgresql://x/y',
      intervalMs: 2000,
      probeSets: ['query'],
      durationMs: 10_000,
    });
  });

  it('defaults to a 1s interval, no opt-in sets and the PG* environment', () => {
    expect(parseCli(['check'])).toMatchObject({ command: 'check', dsn: undefined, intervalMs: 1000, probeSets: [] });
  });

  it('shows help without a command', () => {
    expect(parseCli([])).toBe('help');
    expect(parseCli(['--help'])).toBe('help');
  });

  it('answers --version and -V', () => {
    expect(parseCli(['--version'])).toBe('version');
    expect(parseCli(['-V'])).toBe('version');
  });

  it('keeps --help within an 80x24 terminal', () => {
    const lines = USAGE.split('\n');
    expect(lines.length).toBeLessThanOrEqual(23);
    for (const line of lines) expect(line.length, line).toBeLessThanOrEqual(80);
  });

  it('rejects unknown commands, options and probe sets as user errors', () => {
    expect(() => parseCli(['collect'])).toThrow(UserError);
    expect(() => parseCli(['run', '--bogus'])).toThrow(UserError);
    expect(() => parseCli(['run', '--probes', 'query,llamas'])).toThrow(/unknown probe set llamas: known sets are cpu, sched, query/);
    expect(() => parseCli(['run', 'extra'])).toThrow(/unexpected argument 'extra'/);
    // A role name may hold a newline: the message shows it as a JSON string, on one line.
    expect(() => parseCli(['sink-node', 'add', 'n', '--role', `x\n${'y'.repeat(70)}`])).toThrow(
      /^--role "x\\ny+": expected a role name of 1 to 63 characters$/,
    );
  });

  it('reads every duration option with the same units and refuses negatives in one line', () => {
    expect(parseCli(['run', '--interval', '2min'])).toMatchObject({ intervalMs: 120_000 });
    expect(parseCli(['run', '--history-retention', '36h'])).toMatchObject({ historyRetentionMs: 129_600_000 });
    expect(parseCli(['run', '--history-interval', '1min'])).toMatchObject({ historyIntervalMs: 60_000 });
    expect(() => parseCli(['run', '--history-interval', '-1min'])).toThrow(/^invalid --history-interval '-1min': must be positive$/);
    for (const argv of [
      ['run', '--interval', '-5s'],
      ['run', '--interval=-5s'],
      ['run', '--history-retention', '-1d'],
    ]) {
      expect(() => parseCli(argv), argv.join(' ')).toThrow(/^invalid --(interval|history-retention) '-\d[a-z]+': must be positive$/);
    }
  });

  it('reads the metrics options of run and the options of top', () => {
    expect(parseCli(['run', '--metrics-address', '127.0.0.1:9187', '--metrics-top', '20', '--metrics-query-text'])).toMatchObject({
      metrics: { address: { host: '127.0.0.1', port: 9187 }, top: 20, queryText: true },
    });
    expect(parseCli(['run'])).not.toHaveProperty('metrics');
    expect(() => parseCli(['run', '--metrics-top', '20'])).toThrow('--metrics-top and --metrics-query-text need --metrics-address');
    expect(() => parseCli(['run', '--metrics-address', ':9187', '--metrics-top', '0'])).toThrow(
      "--metrics-top '0': expected a whole number of at least 1",
    );
    expect(parseCli(['top', '--iterations', '2', '--sort', 'io', '--interval', '2s'])).toMatchObject({
      command: 'top',
      intervalMs: 2000,
      top: { iterations: 2, sort: 'io' },
    });
    expect(() => parseCli(['run', '--sort', 'io'])).toThrow('--iterations and --sort are options of top');
  });
});
