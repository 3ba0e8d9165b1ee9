import { describe, expect, it } from 'vitest';
import { UserError } from '../../src/errors.js';
import { AIO_PROBE_SET, aioUnsupportedReason } from '../../src/families/io/aio-probe-set.js';
import type { PostmasterTarget } from '../../src/postmaster/postmaster-target.js';

describe('aio probe set', () => {
  // None of these reads the binary: the version and io_method decide first.
  const binaryPath = '/nonexistent/postgres';

  it('costs nothing where backends do their own IO: before 18, io_method sync or io_uring', () => {
    expect(aioUnsupportedReason({ majorVersion: 17, ioMethod: 'sync', binaryPath })).toMatch(/^PostgreSQL 17 has no io workers/);
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'sync', binaryPath })).toMatch(/^io_method = sync:/);
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'io_uring', binaryPath })).toMatch(/^io_method = io_uring:/);
  });

  it('names the reason, as a UserError, to a caller that asks for its probes where it cannot run', () => {
    const [attachment] = AIO_PROBE_SET.attachments;
    if (attachment?.kind !== 'target') throw new Error('the aio set attaches target probes');
    const target = { majorVersion: 17, ioMethod: 'sync', binaryPath } as PostmasterTarget;
    expect(() => attachment.probes(target)).toThrow(UserError);
    expect(() => attachment.probes(target)).toThrow('probe set aio: PostgreSQL 17 has no io workers');
  });
});
