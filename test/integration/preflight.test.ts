import { describe, expect, it } from 'vitest';
import { hostChecks } from '../../src/capabilities/host-checks.js';

// Needs root and kernel BTF (the unit test checks the messages without them).
describe('hostChecks on this host', () => {
  it('passes on this machine: root, kernel BTF', () => {
    expect(hostChecks().every((c) => c.ok)).toBe(true);
  });
});
