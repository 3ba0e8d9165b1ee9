import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { probeCapabilities } from '../../src/capabilities/probe-capabilities.js';
import { findPgBin, ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { ElfFile } from '../../src/postmaster/elf-file.js';
import { accessorGlobal, userIdGlobals } from '../../src/postmaster/user-id-globals.js';
import { EMBEDDED_MAJORS, embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * OuterUserId and CurrentUserId are static: a stripped build (Debian's) names them nowhere, so
 * the collector decodes their addresses from GetOuterUserId() and GetUserId(). The
 * @embedded-postgres builds are not stripped: their symbol tables say where the two really are.
 */
describe('user-id globals decoded from their accessors', () => {
  for (const major of EMBEDDED_MAJORS) {
    it(`PostgreSQL ${major} (@embedded-postgres): the addresses its symbol table gives`, () => {
      const elf = ElfFile.read(join(embeddedPostgresBin(major), 'postgres'));
      const decoded = userIdGlobals(elf);
      expect(elf.symbol('OuterUserId')?.type).toBe(1); // STT_OBJECT: the local symbol is there to compare with
      expect(decoded.outerUserId).toBe(elf.symbol('OuterUserId')!.value);
      expect(decoded.currentUserId).toBe(elf.symbol('CurrentUserId')!.value);
    });
  }

  it("Debian's stripped 15: found, and the same CurrentUserId GetUserIdAndSecContext loads first", () => {
    const elf = ElfFile.read(join(findPgBin(), 'postgres'));
    expect(elf.symbol('CurrentUserId')).toBeUndefined();
    const decoded = userIdGlobals(elf);
    expect(decoded.outerUserId).not.toBeNull();
    // GetUserIdAndSecContext(&u, &c) starts with the same `mov eax, [rip+d]` of CurrentUserId (then a store).
    const fn = elf.symbol('GetUserIdAndSecContext')!;
    const body = elf.functionBody(fn);
    expect([body[0], body[1]]).toEqual([0x8b, 0x05]);
    expect(decoded.currentUserId).toBe(fn.value + 6n + BigInt(body.readInt32LE(2)));
  });

  it('refuses a function that is not a one-load accessor', () => {
    const elf = ElfFile.read(join(findPgBin(), 'postgres'));
    expect(accessorGlobal(elf, 'PortalRun')).toBeNull();
    expect(accessorGlobal(elf, 'NoSuchFunction')).toBeNull();
  });

  it('check says statements are keyed by the user they ran as, after the calibration backend confirmed both', async () => {
    const cluster = await ThrowawayCluster.start();
    try {
      const lines = await probeCapabilities({ dsn: cluster.connectionString() });
      const line = lines.find((l) => l.name === 'statement user');
      expect(line?.ok, JSON.stringify(line)).toBe(true);
      expect(line?.detail).toMatch(/OuterUserId; CurrentUserId inside SECURITY DEFINER/);
    } finally {
      await cluster.stop();
    }
  });
});
