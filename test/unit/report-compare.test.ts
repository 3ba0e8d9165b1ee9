import { describe, expect, it } from 'vitest';
import { METRIC_COLUMNS } from '../../src/families/index.js';
import { timeParts, whatGrew, withWaitEvent, type PeriodFigures } from '../../src/report/report-compare.js';
import type { ReportColumn } from '../../src/report/report-read.js';

const columns: ReportColumn[] = METRIC_COLUMNS.map((c) => ({
  column: c.column,
  unit: c.unit,
  alreadyCounted: 'alreadyCounted' in c && c.alreadyCounted === true,
  description: c.description,
}));
const { parts, details } = timeParts(columns);

function period(ms: Record<string, number>): PeriodFigures {
  const all = Object.fromEntries([...parts, ...details].map((c) => [c.column, ms[c.column] ?? 0]));
  const total = parts.reduce((s, c) => s + (all[c.column] ?? 0), 0);
  return { calls: 10, per: 'call', ms: { ...all, total_time_ms: total }, ran: true };
}

describe('what grew', () => {
  it('takes the parts from the column list: the partition of total_time_ms, and the details already counted in it', () => {
    // Every ns column but the total is one or the other; a family's new column lands in one without a change here.
    expect([...parts, ...details].map((c) => c.column).sort()).toEqual(
      columns
        .filter((c) => c.unit === 'ns' && c.column !== 'total_time_ms')
        .map((c) => c.column)
        .sort(),
    );
    expect(parts.map((c) => c.column)).toEqual(
      expect.arrayContaining(['on_cpu_ms', 'runq_wait_ms', 'io_wait_ms', 'lock_wait_ms', 'lwlock_wait_ms', 'other_wait_ms']),
    );
    expect(details.map((c) => c.column)).toEqual(expect.arrayContaining(['reclaim_ms', 'compaction_stall_ms', 'writeback_throttle_ms']));
    // Each detail's own description says it is never added to the partition.
    for (const d of details) expect(d.description).toMatch(/^Of which, never add to the partition/);
  });

  it('names the part whose time per call grew most', () => {
    const grew = whatGrew(
      period({ on_cpu_ms: 5, runq_wait_ms: 12, lock_wait_ms: 200 }),
      period({ on_cpu_ms: 5, runq_wait_ms: 2 }),
      columns,
    );
    expect(grew).toEqual([{ column: 'lock_wait_ms', label: 'lock', deltaMs: 200 }]);
  });

  it('names reclaim before on CPU when reclaim explains the on-CPU growth, and not when it is a small share', () => {
    const base = period({ on_cpu_ms: 10 });
    expect(whatGrew(period({ on_cpu_ms: 50, reclaim_ms: 35 }), base, columns).map((g) => [g.label, g.within])).toEqual([
      ['reclaim', 'on CPU'],
      ['on CPU', undefined],
    ]);
    expect(whatGrew(period({ on_cpu_ms: 50, reclaim_ms: 5 }), base, columns).map((g) => g.label)).toEqual(['on CPU']);
  });

  it('names reclaim in the part it grew with when another part grew more (CI: on CPU +83, reclaim +37 in other waits)', () => {
    // Figures of a real run: memory-cgroup reclaim waited for writeback (other waits) while the
    // writeback it started ran beside the statement (on CPU grew more).
    const grew = whatGrew(
      period({ on_cpu_ms: 230.3, runq_wait_ms: 2.7, io_wait_ms: 2, other_wait_ms: 36.2, reclaim_ms: 36.7 }),
      period({ on_cpu_ms: 147 }),
      columns,
    );
    expect(grew.map((g) => [g.label, g.within])).toEqual([
      ['reclaim', 'other waits'],
      ['on CPU', undefined],
    ]);
    // Under a quarter of the whole growth and under half the top part's: not named.
    const small = whatGrew(period({ on_cpu_ms: 230, other_wait_ms: 20, reclaim_ms: 20 }), period({ on_cpu_ms: 147 }), columns);
    expect(small.map((g) => g.label)).toEqual(['on CPU']);
  });

  it('names nothing for a statement that did not get slower', () => {
    expect(whatGrew(period({ on_cpu_ms: 5, lock_wait_ms: 1 }), period({ on_cpu_ms: 6, lock_wait_ms: 1 }), columns)).toEqual([]);
  });

  it('names the wait event behind a wait part that grew, per call of each period, when it explains half of it', () => {
    const grew = whatGrew(period({ on_cpu_ms: 5, lock_wait_ms: 200 }), period({ on_cpu_ms: 5 }), columns);
    // 10 calls in the window, 20 in the baseline: 2,000 ms / 10 against 100 ms / 20 is +195 ms/call.
    const events = { window: { 'Lock:transactionid': 2000, 'IO:DataFileRead': 30 }, baseline: { 'Lock:transactionid': 100 } };
    expect(withWaitEvent(grew, events, { window: 10, baseline: 20 })).toEqual([
      { column: 'wait_event:Lock:transactionid', label: 'Lock:transactionid', deltaMs: 195, within: 'lock' },
      { column: 'lock_wait_ms', label: 'lock', deltaMs: 200 },
    ]);
    // An event explaining less than half of the part's growth is not named.
    expect(withWaitEvent(grew, { window: { 'Lock:tuple': 90 }, baseline: {} }, { window: 1, baseline: 1 })).toEqual(grew);
    // Nor one behind on CPU or the run queue, which no wait event is in.
    const cpu = whatGrew(period({ on_cpu_ms: 300 }), period({ on_cpu_ms: 5 }), columns);
    expect(withWaitEvent(cpu, events, { window: 10, baseline: 20 })).toEqual(cpu);
  });
});
