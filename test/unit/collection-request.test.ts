import { describe, expect, it } from 'vitest';
import { PROBE_SETS } from '../../src/attach/probe-sets.js';
import { MAX_COLLECTION_MS, validateCollectionRequest } from '../../src/control/collection-request.js';
import type { PostmasterTarget } from '../../src/target/postmaster-target.js';

// Only what PROBE_SETS' unsupportedReason reads: a build with and one without PortalRun.
const withPortalRun = { binaryPath: '/usr/lib/postgresql/15/bin/postgres', statementEnd: { kind: 'uretprobe', symbol: 'PortalRun' } } as unknown as PostmasterTarget;
const stripped = { binaryPath: '/opt/pg/bin/postgres', statementEnd: null } as unknown as PostmasterTarget;
// On this kernel every default set is supported (the memory and io tracepoints exist).
const DEFAULT_SETS = Object.values(PROBE_SETS).filter((s) => s.default).map((s) => s.name);

describe('validateCollectionRequest', () => {
  it('accepts known sets and expands default to the always-on sets', () => {
    expect(validateCollectionRequest({ id: '7', probes: ['query'], duration_s: 2 }, withPortalRun)).toEqual({ ok: true, id: 7, sets: ['query'], durationMs: 2000 });
    expect(validateCollectionRequest({ id: '8', probes: ['default', 'query', 'query'], duration_s: 0.5 }, withPortalRun)).toEqual({
      ok: true,
      id: 8,
      sets: [...DEFAULT_SETS, 'query'],
      durationMs: 500,
    });
  });

  it('gives a NULL duration the cap: until stopped, at most 24 hours', () => {
    const r = validateCollectionRequest({ id: 1, probes: ['query'], duration_s: null }, withPortalRun);
    expect(r).toMatchObject({ ok: true, durationMs: MAX_COLLECTION_MS });
    expect(MAX_COLLECTION_MS).toBe(86_400_000);
  });

  it('rejects zero, negative, excessive and non-numeric durations', () => {
    for (const d of [0, -1, 86_400.001, 2_592_000, 'soon', Number.NaN, Infinity]) {
      const r = validateCollectionRequest({ id: 1, probes: ['query'], duration_s: d }, withPortalRun);
      expect(r, String(d)).toMatchObject({ ok: false, error: expect.stringMatching(/out of range/) });
    }
    expect(validateCollectionRequest({ id: 1, probes: ['query'], duration_s: 86_400 }, withPortalRun)).toMatchObject({ ok: true });
  });

  it('names unknown sets, quoted, whatever they contain', () => {
    const r = validateCollectionRequest({ id: 3, probes: ['query', 'nosuch', "x'; DROP TABLE t; --", 'nosuch', '__proto__', 'toString'] , duration_s: 1 }, withPortalRun);
    expect(r).toEqual({
      ok: false,
      id: 3,
      error: `unknown probe set "nosuch", "x'; DROP TABLE t; --", "__proto__", "toString": known sets are default, ${Object.keys(PROBE_SETS).join(', ')}`,
    });
  });

  it('rejects mistyped, empty, oversized and NULL-holding probe lists', () => {
    for (const probes of [null, 'query', [], [null], [42], [''], ['x'.repeat(64)], Array(33).fill('query'), { 0: 'query' }]) {
      const r = validateCollectionRequest({ id: 1, probes, duration_s: 1 }, withPortalRun);
      expect(r.ok, JSON.stringify(probes)).toBe(false);
    }
  });

  it('rejects a set this host cannot run, with the reason', () => {
    expect(validateCollectionRequest({ id: 4, probes: ['query'], duration_s: 1 }, stripped)).toEqual({
      ok: false,
      id: 4,
      error: 'probe set query is not supported here: /opt/pg/bin/postgres exports no PortalRun',
    });
    // The default sets are supported everywhere the sidecar runs.
    expect(validateCollectionRequest({ id: 5, probes: ['default'], duration_s: 1 }, stripped)).toMatchObject({ ok: true, sets: DEFAULT_SETS });
  });
});
