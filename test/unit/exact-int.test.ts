import { describe, expect, it } from 'vitest';
import { addExact, exactInt, isZero, subtractExact, sumExact } from '../../src/exact-int.js';

const MAX = Number.MAX_SAFE_INTEGER;

describe('ExactInt', () => {
  it('is a number exactly while safe, a bigint beyond', () => {
    expect(exactInt(BigInt(MAX))).toBe(MAX);
    expect(exactInt(BigInt(-MAX))).toBe(-MAX);
    expect(exactInt(BigInt(MAX) + 1n)).toBe(2n ** 53n);
    expect(exactInt(2n ** 64n - 1n)).toBe(2n ** 64n - 1n);
  });

  it('subtracts and adds without rounding, across the two forms', () => {
    expect(subtractExact(2n ** 64n - 1n, 2n ** 64n - 11n)).toBe(10);
    expect(subtractExact(MAX, -MAX)).toBe(2n * BigInt(MAX));
    expect(subtractExact(2n ** 53n + 5n, 3)).toBe(2n ** 53n + 2n);
    expect(addExact(MAX, 1)).toBe(2n ** 53n);
    expect(addExact(MAX, 2)).toBe(2n ** 53n + 1n);
    expect(addExact(2n ** 53n, -2)).toBe(MAX - 1);
    expect(addExact(1.5e3, 2)).toBe(1502);
  });

  it("sums a histogram's slots exactly, a number while it can be", () => {
    expect(sumExact([])).toBe(0);
    expect(sumExact([1, 2, 3n])).toBe(6);
    expect(sumExact([MAX, 1, 1])).toBe(2n ** 53n + 1n);
  });

  it('knows zero in either form', () => {
    expect(isZero(0)).toBe(true);
    expect(isZero(0n)).toBe(true);
    expect(isZero(1)).toBe(false);
    expect(isZero(2n ** 60n)).toBe(false);
  });
});
