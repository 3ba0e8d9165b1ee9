import { describe, expect, it } from 'vitest';
import { aioUnsupportedReason } from '../../src/families/io/aio-probe-set.js';

describe('aio probe set', () => {
  // None of these reads the binary: the version and io_method decide first.
  const binaryPath = '/nonexistent/postgres';

  it('costs nothing where backends do their own IO: before 18, io_method sync or io_uring', () => {
    expect(aioUnsupportedReason({ majorVersion: 17, ioMethod: 'sync', binaryPath })).toMatch(/^PostgreSQL 17 has no io workers/);
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'sync', binaryPath })).toMatch(/^io_method = sync:/);
    expect(aioUnsupportedReason({ majorVersion: 18, ioMethod: 'io_uring', binaryPath })).toMatch(/^io_method = io_uring:/);
  });
});
