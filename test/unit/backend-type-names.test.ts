import { describe, expect, it } from 'vitest';
import { BackendTypeNames } from '../../src/storage/backend-type-names.js';

describe('BackendTypeNames', () => {
  it('names live processes as pg_stat_activity does and the postmaster by its pid', () => {
    const names = new BackendTypeNames(100);
    names.observe(200, 'client backend');
    expect(names.name({ pid: 200, backendType: 3, identityKnown: true })).toBe('client backend');
    expect(names.name({ pid: 100, backendType: -1, identityKnown: false })).toBe('postmaster');
  });

  it('names a process that exited unseen by the number its type had on live processes', () => {
    const names = new BackendTypeNames(100);
    names.observe(200, 'client backend');
    names.learn(200, 3);
    expect(names.name({ pid: 300, backendType: 3, identityKnown: true })).toBe('client backend');
  });

  it('does not guess between background worker kinds sharing one number', () => {
    const names = new BackendTypeNames(100);
    names.observe(201, 'parallel worker');
    names.learn(201, 4);
    names.observe(202, 'logical replication launcher');
    names.learn(202, 4);
    expect(names.name({ pid: 300, backendType: 4, identityKnown: true })).toBe('background worker');
    expect(names.name({ pid: 301, backendType: 9, identityKnown: true })).toBe('backend type 9');
    expect(names.name({ pid: 302, backendType: -1, identityKnown: false })).toBe('postmaster child');
  });
});
