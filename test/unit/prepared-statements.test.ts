import { describe, expect, it } from 'vitest';
import { PreparedStatements } from '../../src/storage/preparing-pool.js';

/* Which statement texts the writer sends as named prepared statements (PreparedStatements). */
describe('PreparedStatements', () => {
  it('names a text at its third sending, the same name each time after', () => {
    const statements = new PreparedStatements();
    expect(statements.nameFor('SELECT 1')).toBeNull();
    expect(statements.nameFor('SELECT 1')).toBeNull();
    const name = statements.nameFor('SELECT 1');
    expect(name).toMatch(/^pgbpf_[0-9a-f]{24}$/);
    expect(statements.nameFor('SELECT 1')).toBe(name);
    expect(statements.nameFor('SELECT 2')).toBeNull();
  });

  it('names 32 texts at most, and counts 256 at most', () => {
    const statements = new PreparedStatements();
    const send = (text: string, times: number) => Array.from({ length: times }, () => statements.nameFor(text)).at(-1);
    for (let i = 0; i < 40; i++) send(`SELECT ${i}`, 3);
    expect(statements.size).toBe(32);
    expect(send('SELECT 0', 1)).not.toBeNull();
    expect(send('SELECT 39', 5)).toBeNull();
    // Past 256 texts counted, a new text is never counted, so never named.
    const other = new PreparedStatements();
    for (let i = 0; i < 300; i++) other.nameFor(`SELECT ${i}`);
    expect([1, 2, 3].map(() => other.nameFor('SELECT 299'))).toEqual([null, null, null]);
    expect([1, 2].map(() => other.nameFor('SELECT 0')).at(-1)).toMatch(/^pgbpf_/);
  });

  it('names nothing more once the server refused a named statement, and only for those codes', () => {
    const statements = new PreparedStatements();
    for (let i = 0; i < 3; i++) statements.nameFor('SELECT 1');
    expect(statements.refused(Object.assign(new Error('duplicate key'), { code: '23505' }))).toBe(false);
    expect(statements.nameFor('SELECT 1')).not.toBeNull();
    expect(statements.refused(Object.assign(new Error('prepared statement "x" does not exist'), { code: '26000' }))).toBe(true);
    expect(statements.nameFor('SELECT 1')).toBeNull();
  });
});
