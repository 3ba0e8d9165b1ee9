import { describe, expect, it } from 'vitest';
import { MapEviction } from '../../src/deltas/map-eviction.js';

describe('MapEviction', () => {
  const keys = [Buffer.from([1]), Buffer.from([2])];

  it('returns what each key held, null for one already gone', () => {
    const eviction = new MapEviction('histograms', (raw) => raw.map((k) => (k[0] === 1 ? 'held' : null)));
    expect(eviction.delete(keys)).toEqual(['held', null]);
    expect(eviction.enabled).toBe(true);
  });

  it('is off without a delete function, and deletes nothing for no keys', () => {
    let calls = 0;
    expect(new MapEviction<string>('queries', undefined).delete(keys)).toBeNull();
    expect(new MapEviction<string>('queries', undefined).enabled).toBe(false);
    expect(new MapEviction('queries', (raw) => (calls++, raw.map(() => 'x'))).delete([])).toBeNull();
    expect(calls).toBe(0);
  });

  it('turns itself off with one line the first time the kernel refuses, and asks no more', () => {
    const lines: string[] = [];
    let calls = 0;
    const eviction = new MapEviction<string>(
      'lock_waits',
      () => {
        calls++;
        throw new Error('Operation not supported');
      },
      (line) => lines.push(line),
    );
    expect(eviction.delete(keys)).toBeNull();
    expect(eviction.delete(keys)).toBeNull();
    expect(calls).toBe(1);
    expect(eviction.enabled).toBe(false);
    expect(lines).toEqual([
      'cannot evict from the lock_waits map on this kernel, a full lock_waits map stays full: Operation not supported',
    ]);
  });
});
