import { describe, expect, it } from 'vitest';
import { formatTable } from '../../src/demo/format-table.js';
import { parseTextTable } from '../support/text-table.js';

describe('formatTable', () => {
  it('aligns columns, leaves NULL cells empty in place, and rounds fractions', () => {
    const text = formatTable(
      [
        { query: 'UPDATE t SET x = 1', locktype: 'transactionid', relation: null, wait_ms: 301.26 },
        { query: 'INSERT INTO t', locktype: 'extend', relation: 't', wait_ms: 0.123 },
      ],
      ['query', 'locktype', 'relation', 'wait_ms'],
    );
    expect(text.split('\n')[0]).toBe('query               locktype       relation  wait_ms');
    const parsed = parseTextTable(['Title:', ...text.split('\n'), '', 'next']);
    expect(parsed?.rows).toEqual([
      { query: 'UPDATE t SET x = 1', locktype: 'transactionid', relation: '', wait_ms: '301.3' },
      { query: 'INSERT INTO t', locktype: 'extend', relation: 't', wait_ms: '0.12' },
    ]);
  });
});
