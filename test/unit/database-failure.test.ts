import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { databaseFailure } from '../../src/errors.js';

describe('databaseFailure: what the database did, as one line', () => {
  it("names the server's own errors and lost connections, and nothing else", () => {
    const server = new pg.DatabaseError('terminating connection due to administrator command', 0, 'error');
    Object.assign(server, { severity: 'FATAL', code: '57P01' });
    expect(databaseFailure(server)).toBe('PostgreSQL said: terminating connection due to administrator command');
    // node-postgres's own words when the server closed the socket, or when a client that lost it is used again.
    expect(databaseFailure(new Error('Connection terminated unexpectedly'))).toBe(
      'lost the connection to PostgreSQL: Connection terminated unexpectedly',
    );
    expect(databaseFailure(new Error('Client has encountered a connection error and is not queryable'))).toMatch(
      /^lost the connection to PostgreSQL: /,
    );
    expect(databaseFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(
      'lost the connection to PostgreSQL: read ECONNRESET',
    );
    // Ours stay bugs: no line here, so the CLI keeps their stack.
    expect(databaseFailure(new TypeError("Cannot read properties of undefined (reading 'x')"))).toBeNull();
    expect(databaseFailure(Object.assign(new Error('no such file'), { code: 'ENOENT' }))).toBeNull();
    expect(databaseFailure('Connection terminated')).toBeNull();
  });
});
