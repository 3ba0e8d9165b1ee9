import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { findPgBin, osUserIds } from '../../src/cluster/throwaway-cluster.js';
import { MemoryCgroup } from '../../src/cluster/memory-cgroup.js';
import { mirrorPostgresTree } from './postgres-tree.js';

/**
 * The system's PostgreSQL, started inside a memory cgroup of its own whose page cache holds the
 * server binary's text: a fresh copy of `postgres`, dropped from the page cache after it was
 * written, so that the first process to run it (the postmaster, in the cgroup from its exec on)
 * charges its pages there. reclaimText() then takes them back from every process of the server,
 * as memory pressure would: each backend's next instructions fault them in again from disk (a
 * major fault, asleep with the kernel's iowait flag).
 */
export function postgresInMemoryCgroup(): { pgBin: string; reclaimText(): void; remove(): void } {
  const realBin = findPgBin();
  const root = mkdtempSync(join(tmpdir(), 'pg-memcg-'));
  chmodSync(root, 0o755);
  // Two trees: the tools and a wrapper named postgres in one, the binary's copy in the other (the collector knows a server by its binary's name).
  const bin = mirrorPostgresTree(join(root, 'tools'), realBin);
  for (const tool of ['initdb', 'pg_ctl']) copyFileSync(join(realBin, tool), join(bin, tool));
  const text = join(mirrorPostgresTree(join(root, 'server'), realBin), 'postgres');
  copyFileSync(join(realBin, 'postgres'), text);
  // Written back, then out of the page cache: the server's own faults bring it in, charged to the cgroup.
  execFileSync('sync', [text]);
  execFileSync('dd', [`if=${text}`, 'iflag=nocache', 'count=0', 'status=none']);
  const cgroup = MemoryCgroup.create('pgbpf-text', 1 << 30);
  // As root, ThrowawayCluster runs the server as the OS user postgres: it moves itself in.
  if (userInfo().uid === 0) chownSync(join(cgroup.dir, 'cgroup.procs'), osUserIds('postgres').uid, 0);
  // initdb and pg_ctl run `postgres` from their own directory: every server process enters the cgroup before it execs the copy.
  writeFileSync(join(bin, 'postgres'), `#!/bin/sh\necho $$ > ${join(cgroup.dir, 'cgroup.procs')}\nexec ${text} "$@"\n`, { mode: 0o755 });
  return {
    pgBin: bin,
    reclaimText: () => {
      try {
        writeFileSync(join(cgroup.dir, 'memory.force_empty'), '0');
      } catch {
        // EBUSY: what cannot be reclaimed (shared memory, no swap) stays; the clean text pages went first
      }
    },
    remove: () => {
      cgroup.remove();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
