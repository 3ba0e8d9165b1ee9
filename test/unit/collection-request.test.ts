import { describe, expect, it } from 'vitest';
import { PROBE_SETS, type ProbeSetName } from '../../src/families/index.js';
import { probeSetUnsupportedReason } from '../../src/capabilities/probe-set-support.js';
import { MAX_COLLECTION_MS, validateCollectionRequest } from '../../src/control/collection-request.js';
import type { PostmasterTarget, StatusLayout } from '../../src/postmaster/postmaster-target.js';

// Only what the sets' support check reads: a build with and one without PortalRun.
const target = (t: object) => t as unknown as PostmasterTarget;
const layout = { activityStartOffset: 96 } as unknown as StatusLayout;
const supportOf =
  (t: PostmasterTarget, l: StatusLayout | null = layout) =>
  (set: ProbeSetName) =>
    probeSetUnsupportedReason(set, { target: t, layout: l, perfEvents: {} });
const withPortalRun = supportOf(
  target({ binaryPath: '/usr/lib/postgresql/15/bin/postgres', statementEnd: { kind: 'uretprobe', symbol: 'PortalRun' } }),
);
const stripped = supportOf(target({ binaryPath: '/opt/pg/bin/postgres', statementEnd: null }));
// On this kernel every default set is supported (the memory and io tracepoints exist), but
// for aio, which only PostgreSQL 18's io workers need: 'default' leaves it out elsewhere.
const DEFAULT_SETS = Object.values(PROBE_SETS)
  .filter((s) => s.default && s.name !== 'aio')
  .map((s) => s.name);

describe('validateCollectionRequest', () => {
  it('accepts known sets and expands default to the always-on sets', () => {
    expect(validateCollectionRequest({ id: '7', probes: ['query'], duration_s: 2 }, withPortalRun)).toEqual({
      ok: true,
      id: 7,
      sets: ['query'],
      durationMs: 2000,
    });
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
    const r = validateCollectionRequest(
      { id: 3, probes: ['query', 'nosuch', "x'; DROP TABLE t; --", 'nosuch', '__proto__', 'toString'], duration_s: 1 },
      withPortalRun,
    );
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
    expect(validateCollectionRequest({ id: 5, probes: ['default'], duration_s: 1 }, stripped)).toMatchObject({
      ok: true,
      sets: DEFAULT_SETS,
    });
  });

  it('rejects latency where the calibrated layout has no query_start/state_change, as run and check say', () => {
    const t = target({ binaryPath: '/usr/lib/postgresql/15/bin/postgres', statementEnd: null });
    const noActivityStart = { activityStartOffset: null } as unknown as StatusLayout;
    const reason = probeSetUnsupportedReason('latency', { target: t, layout: noActivityStart, perfEvents: {} });
    expect(reason).toMatch(/query_start\/state_change not found/);
    expect(validateCollectionRequest({ id: 6, probes: ['latency'], duration_s: 1 }, supportOf(t, noActivityStart))).toEqual({
      ok: false,
      id: 6,
      error: `probe set latency is not supported here: ${reason}`,
    });
    expect(validateCollectionRequest({ id: 7, probes: ['latency'], duration_s: 1 }, supportOf(t))).toMatchObject({
      ok: true,
      sets: ['latency'],
    });
  });
});
