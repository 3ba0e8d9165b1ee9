import { describe, expect, it } from 'vitest';
import { ElfFile } from '../../src/postmaster/elf-file.js';
import { findPgBin } from '../../src/cluster/throwaway-cluster.js';
import { join } from 'node:path';
import { collectorObjectPath } from '../../src/collector/collector-object.js';

describe('ElfFile', () => {
  const postgres = ElfFile.read(join(findPgBin(), 'postgres'));

  it('finds the Postgres globals the collector reads in every backend', () => {
    for (const name of ['MyBEEntry', 'my_wait_event_info']) {
      const symbol = postgres.symbol(name);
      expect(symbol?.type).toBe(1); // STT_OBJECT
      expect(symbol?.size).toBe(8n); // a pointer
    }
    expect(postgres.symbol('LWLockAcquire')?.type).toBe(2); // STT_FUNC
  });

  it("lists the build's USDT probes (Debian builds with --enable-dtrace)", () => {
    const names = postgres
      .usdtNotes()
      .filter((n) => n.provider === 'postgresql')
      .map((n) => n.name);
    expect(names).toContain('query__execute__done');
    expect(names).toContain('lock__wait__start');
  });

  it("reads a relocatable object, which has no program headers (the collector's BPF object)", () => {
    const object = ElfFile.read(collectorObjectPath());
    expect(object.symbol('on_sched_switch')?.type).toBe(2); // STT_FUNC
    expect([...object.symbols().values()].filter((s) => s.type === 2).map((s) => s.name)).toContain('on_cpu_tick');
    expect(object.symbol('no_such_program')).toBeUndefined();
  });

  it('rejects files that are not 64-bit ELF', () => {
    expect(() => new ElfFile(Buffer.from('#!/bin/sh\necho hi\n'.padEnd(80)), 'script')).toThrow(/script is not an ELF file/);
  });
});
