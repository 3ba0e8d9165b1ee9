import { describe, expect, it } from 'vitest';
import { BackendTypeNames } from '../../src/postmaster/backend-type-names.js';

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

describe("BackendTypeNames with the version's BackendType enum", () => {
  it('names a process that exited unseen by the enum of its major version', () => {
    const names = new BackendTypeNames(100, { majorVersion: 15, clientBackendType: 3 });
    expect(names.name({ pid: 300, backendType: 3, identityKnown: true })).toBe('client backend');
    expect(names.name({ pid: 301, backendType: 2, identityKnown: true })).toBe('autovacuum worker');
    const pg18 = new BackendTypeNames(100, { majorVersion: 18, clientBackendType: 1 });
    expect(pg18.name({ pid: 302, backendType: 12, identityKnown: true })).toBe('io worker');
  });

  it('names an unseen background worker by the enum, not after the one kind seen alive under its number', () => {
    const names = new BackendTypeNames(100, { majorVersion: 17, clientBackendType: 1 });
    names.observe(200, 'logical replication launcher');
    names.learn(200, 4);
    expect(names.name({ pid: 200, backendType: 4, identityKnown: true })).toBe('logical replication launcher');
    expect(names.name({ pid: 300, backendType: 4, identityKnown: true })).toBe('background worker');
  });

  it('does not use the table when the calibrated client backend number disagrees with it', () => {
    const names = new BackendTypeNames(100, { majorVersion: 15, clientBackendType: 4 });
    expect(names.name({ pid: 300, backendType: 2, identityKnown: true })).toBe('backend type 2');
  });
});
