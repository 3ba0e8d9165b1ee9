import { describe, expect, it } from 'vitest';
import { pgArray } from '../../src/storage/metric-arrays.js';

describe('pgArray', () => {
  it('writes numbers, bigints, booleans and NULLs as a Postgres array literal', () => {
    expect(pgArray([1, 2.5, null, 18446744073709551615n, -3n, 1e-7])).toBe('{1,2.5,NULL,18446744073709551615,-3,1e-7}');
    expect(pgArray([true, false])).toBe('{t,f}');
    expect(pgArray([])).toBe('{}');
  });
});
