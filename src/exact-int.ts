/**
 * An integer as exact as BPF's 64-bit counters: a number while it is a safe integer, a bigint
 * beyond. A flush handles tens of thousands of counters, nearly all far below 2^53 (104 days of
 * nanoseconds): as numbers they cost no allocation, where a bigint each was most of a 10,000-row
 * flush's garbage (bench/journal/flush-cost.md#numbers-while-exact-reads-without-copies-history-that-waits). A counter past 2^53 stays exact as a bigint.
 *
 * Made by exactInt() or the functions here, a value is a number whenever it is safe, so zero is
 * always 0; values made elsewhere may be bigints of any size, which every function here takes.
 * `<` and `>` compare the two forms as they are.
 *
 * @example
 * subtractExact(2n ** 60n + 5n, 2n ** 60n); // 5
 * addExact(Number.MAX_SAFE_INTEGER, 1);     // 9007199254740992n
 */
export type ExactInt = number | bigint;

/** `v` as a number when that is exact. */
export function exactInt(v: bigint): ExactInt {
  return v <= MAX_SAFE && v >= MIN_SAFE ? Number(v) : v;
}

export function subtractExact(a: ExactInt, b: ExactInt): ExactInt {
  if (typeof a === 'number' && typeof b === 'number') {
    const d = a - b;
    // Two safe integers differ by at most 2^54: exact unless it is beyond the safe range.
    if (d <= Number.MAX_SAFE_INTEGER && d >= Number.MIN_SAFE_INTEGER) return d;
  }
  return exactInt(BigInt(a) - BigInt(b));
}

export function addExact(a: ExactInt, b: ExactInt): ExactInt {
  if (typeof a === 'number' && typeof b === 'number') {
    const s = a + b;
    if (s <= Number.MAX_SAFE_INTEGER && s >= Number.MIN_SAFE_INTEGER) return s;
  }
  return exactInt(BigInt(a) + BigInt(b));
}

/** The sum of `values`, exact (a bigint once past 2^53). */
export function sumExact(values: readonly ExactInt[]): ExactInt {
  let sum: ExactInt = 0;
  for (const v of values) sum = addExact(sum, v);
  return sum;
}

export function isZero(v: ExactInt): boolean {
  return v === 0 || v === 0n;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
