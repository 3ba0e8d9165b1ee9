import { describe, expect, it } from 'vitest';
import { hostChecks } from '../../src/capabilities/host-checks.js';

describe('hostChecks', () => {
  it('names a missing BTF and a missing root, each on one line', () => {
    const checks = hostChecks({ uid: 1000, btfPath: '/nonexistent/vmlinux' });
    expect(checks.find((c) => c.name === 'btf')).toMatchObject({ ok: false, detail: expect.stringMatching(/^no BTF: .*CONFIG_DEBUG_INFO_BTF=y/) });
    expect(checks.find((c) => c.name === 'privileges')).toMatchObject({ ok: false, detail: expect.stringMatching(/^not root/) });
    for (const c of checks) expect(c.detail).not.toMatch(/\n/);
  });
});
