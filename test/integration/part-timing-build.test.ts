import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { collectorObjectPath } from '../../src/collector/collector-object.js';
import { packageRoot } from '../../src/package-root.js';
import { ElfFile } from '../../src/postmaster/elf-file.js';

/*
 * bench/switch-parts.ts times parts of on_sched_switch in a -DPART_TIMING build of the object,
 * and with --ab times it in halves with and without the wait events in a -DWAIT_EVENTS_AB build
 * (bpf/part-timing.bpf.h). Those builds are made only by the bench, so they are built here too:
 * each must keep compiling and hold the counters the bench reads, and the shipped object none.
 */
const dir = mkdtempSync(join(tmpdir(), 'pgbpf-part-timing-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const COUNTERS = ['part_runs', 'part_ns', 'part_empty_ns'];
const AB_COUNTERS = ['ab_runs', 'ab_ns'];
const STT_OBJECT = 1;

function build(...defines: string[]): ElfFile {
  const out = join(dir, `pgstats${defines.join('')}.bpf.o`);
  execFileSync('bash', [join(packageRoot(), 'scripts', 'build-bpf-object.sh'), 'bpf/pgstats.bpf.c', out, ...defines]);
  return ElfFile.read(out);
}

it('builds the timed object with its part counters, and ships the object without them', () => {
  const timed = build('-DPART_TIMING');
  for (const name of COUNTERS) {
    const symbol = timed.symbol(name);
    expect(symbol?.type, name).toBe(STT_OBJECT);
    // One __u64 per part of enum timed_part, as bench/switch-parts.ts names them.
    expect(symbol?.size, name).toBe(8n * 5n);
  }
  expect(timed.symbol('on_sched_switch')?.type).toBe(2);
  const shipped = ElfFile.read(collectorObjectPath());
  for (const name of [...COUNTERS, ...AB_COUNTERS]) expect(shipped.symbol(name), name).toBeUndefined();
});

it('builds the halves object and its control with their counters', () => {
  for (const defines of [['-DWAIT_EVENTS_AB'], ['-DWAIT_EVENTS_AB', '-DWAIT_EVENTS_AB_SAME']]) {
    const halves = build(...defines);
    for (const name of AB_COUNTERS) {
      // One __u64 per half: with the wait events, without (or the same code, in the control).
      expect(halves.symbol(name)?.size, `${name} ${defines}`).toBe(8n * 2n);
      expect(halves.symbol(name)?.type, `${name} ${defines}`).toBe(STT_OBJECT);
    }
    for (const name of COUNTERS) expect(halves.symbol(name), name).toBeUndefined();
  }
});
