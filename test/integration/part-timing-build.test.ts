import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { collectorObjectPath } from '../../src/collector/collector-object.js';
import { packageRoot } from '../../src/package-root.js';
import { ElfFile } from '../../src/postmaster/elf-file.js';

/*
 * bench/switch-parts.ts times parts of on_sched_switch in a -DPART_TIMING build of the object
 * (bpf/part-timing.bpf.h). That build is made only by the bench, so it is built here too: it must
 * keep compiling, hold the counters the bench reads, and the shipped object must hold none.
 */
const dir = mkdtempSync(join(tmpdir(), 'pgbpf-part-timing-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const COUNTERS = ['part_runs', 'part_ns', 'part_empty_ns'];
const STT_OBJECT = 1;

it('builds the timed object with its part counters, and ships the object without them', () => {
  const out = join(dir, 'pgstats.bpf.o');
  execFileSync('bash', [join(packageRoot(), 'scripts', 'build-bpf-object.sh'), 'bpf/pgstats.bpf.c', out, '-DPART_TIMING']);
  const timed = ElfFile.read(out);
  for (const name of COUNTERS) {
    const symbol = timed.symbol(name);
    expect(symbol?.type, name).toBe(STT_OBJECT);
    // One __u64 per part of enum timed_part, as bench/switch-parts.ts names them.
    expect(symbol?.size, name).toBe(8n * 5n);
  }
  expect(timed.symbol('on_sched_switch')?.type).toBe(2);
  const shipped = ElfFile.read(collectorObjectPath());
  for (const name of COUNTERS) expect(shipped.symbol(name), name).toBeUndefined();
});
