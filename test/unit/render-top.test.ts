import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fmt, renderTop, type TopScreen } from '../../src/top/render-top.js';
import type { TopRead } from '../../src/top/top-read.js';
import { topRates } from '../../src/top/top-rates.js';
import { parseTopOptions } from '../../src/top/top-options.js';

/*
 * top's screen from two reads of bpf_stats (test/fixtures/top/reads.json, in the shape
 * readTop() returns), against golden screens checked in next to them. UPDATE_EXPECTED=1
 * rewrites the golden files; review the diff.
 */
const dir = join(import.meta.dirname, '../fixtures/top');
const [first, second] = JSON.parse(readFileSync(join(dir, 'reads.json'), 'utf8')) as [TopRead, TopRead];

function screen(sort: TopScreen['sort']): TopScreen {
  return {
    source: 'postgres@db1:5432',
    clock: '05:33:44',
    rates: topRates(first, second),
    sort,
    flushAgeSeconds: 0.4,
    collectors: 1,
    droppedEvents: 3,
    lastError: null,
  };
}

function golden(name: string, lines: string[]): void {
  const file = join(dir, name);
  const text = `${lines.join('\n')}\n`;
  if (process.env.UPDATE_EXPECTED) writeFileSync(file, text);
  expect(text).toBe(readFileSync(file, 'utf8'));
}

describe('top rates', () => {
  it('divides by the time between the flushes the reads include, and counts new rows from 0', () => {
    const rates = topRates(first, second)!;
    expect(rates.seconds).toBe(2);
    const workload = rates.queries.find((q) => q.row.key.endsWith('-4613286380960178923'))!;
    expect(workload.perSecond).toEqual({ calls: 14, total: 1000, cpu: 640, runq: 360, io: 0, lock: 0, lwlock: 0, reclaim: 0 });
    // Appeared after the first read: all of it is new.
    expect(rates.queries.find((q) => q.row.key.endsWith('/1234567'))!.perSecond.total).toBe(150);
    // Idle before the read window and without a baseline: waits one refresh, not a false spike.
    expect(rates.queries.find((q) => q.row.key.endsWith('/777'))).toBeUndefined();
    // Not measured stays not measured.
    expect(rates.queries.find((q) => q.row.key.endsWith('/711340031234'))!.perSecond.reclaim).toBeNull();
  });

  it('has no rates without a newer flush', () => {
    expect(topRates(second, second)).toBeNull();
    expect(topRates({ ...first, flushedAtMs: null }, second)).toBeNull();
  });
});

describe('renderTop', () => {
  it('fits 80x24, sorted by cpu', () => {
    const lines = renderTop(screen('cpu'), { width: 80, height: 24 });
    expect(lines).toHaveLength(24);
    for (const line of lines) expect(line.length, line).toBeLessThanOrEqual(80);
    golden('screen-cpu-80x24.txt', lines);
  });

  it('sorts by lock wait with l, and marks the sort column', () => {
    const lines = renderTop(screen('lock'), { width: 80, height: 24 });
    golden('screen-lock-80x24.txt', lines);
    const firstQuery = lines[4]!;
    expect(firstQuery).toContain('LOCK TABLE t');
    expect(lines[3]).toContain('lock*');
  });

  it("shows each statement's top wait event where the screen is wide enough", () => {
    const lines = renderTop(screen('cpu'), { width: 120, height: 24 });
    golden('screen-cpu-120x24.txt', lines);
    expect(lines[3]).toContain('TOP WAIT');
    expect(lines.find((l) => l.includes('UPDATE pgbench_accounts'))).toContain('Lock:transactionid');
    expect(lines.find((l) => l.includes('LOCK TABLE t'))).toMatch(/ - +LOCK TABLE t/);
    // At 80 columns the query text keeps its room.
    expect(renderTop(screen('cpu'), { width: 80, height: 24 })[3]).not.toContain('TOP WAIT');
  });

  it('shrinks to the terminal and keeps the keys on the last line', () => {
    const lines = renderTop(screen('io'), { width: 60, height: 12 });
    expect(lines).toHaveLength(12);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(60);
    expect(lines.at(-1)).toMatch(/^keys: /);
  });

  it('says when it waits for a second flush, and shows a collector error', () => {
    const lines = renderTop(
      { ...screen('cpu'), rates: null, flushAgeSeconds: null, lastError: 'connection refused' },
      { width: 80, height: 24 },
    );
    expect(lines[0]).toContain('no flush yet');
    expect(lines[1]).toBe('collector error: connection refused');
    expect(lines).toContain('  (waiting for two flushes to compute rates)');
  });

  it('fits every figure in 5 characters', () => {
    for (const v of [0, 0.004, 1, 9.999, 12.34, 99.9, 999, 12345, 99999, 123456, 9_999_999, 12_345_678, 1e9, 5e11])
      expect(fmt(v).length, String(v)).toBeLessThanOrEqual(5);
    expect(fmt(null)).toBe('-');
    expect(fmt(640)).toBe('640');
  });
});

describe('top options', () => {
  it('sorts by cpu unless told, and refuses unknown keys', () => {
    expect(parseTopOptions(undefined, undefined)).toEqual({ sort: 'cpu' });
    expect(parseTopOptions('3', 'time')).toEqual({ sort: 'total', iterations: 3 });
    expect(() => parseTopOptions(undefined, 'speed')).toThrow(/--sort 'speed'/);
    expect(() => parseTopOptions('0', undefined)).toThrow(/--iterations '0'/);
  });
});
