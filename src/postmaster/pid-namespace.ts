import { readdirSync, readFileSync, statSync } from 'node:fs';
import { procStat } from './proc-stat.js';

/*
 * Pids across pid namespaces. Postgres names its processes by their pid in its own pid
 * namespace (pg_backend_pid(), pg_stat_activity.pid, BackendKeyData); /proc shows the pids of
 * the namespace /proc was mounted in; BPF always sees the initial namespace's. Three
 * placements:
 *
 *  - everything on the host: the three agree;
 *  - Postgres in a container, collector on the host: /proc shows host pids, and each process's
 *    /proc/<pid>/status has NSpid, its pid at every level down to its own namespace (last);
 *  - collector inside the container's pid namespace (a pod with a shared process namespace):
 *    /proc shows Postgres' own pids and nothing maps them to the host's, so only BPF can
 *    (bpf/instance.bpf.h, CollectorObject.findTgid).
 */

/** The pids of a process at every pid namespace level from /proc's down to its own (NSpid); null when gone. */
export function nsPids(procPid: number): number[] | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${procPid}/status`, 'utf8');
  } catch {
    return null;
  }
  const line = text.split('\n').find((l) => l.startsWith('NSpid:'));
  // Kernels before 4.1 have no NSpid: then there is only one level to see.
  return line ? line.slice('NSpid:'.length).trim().split(/\s+/).map(Number) : [procPid];
}

/** The pid Postgres knows a process by, given its /proc pid: the last NSpid entry. */
export function pgPidOf(procPid: number): number | null {
  return nsPids(procPid)?.at(-1) ?? null;
}

/**
 * The /proc pids of processes whose pid in their own (deeper) pid namespace is `pgPid`, and
 * whose parent is `parent` when given: the host's view of a containerised backend.
 */
export function procPidsFor(pgPid: number, parent?: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    if (parent !== undefined && procStat(pid)?.ppid !== parent) continue;
    const levels = nsPids(pid);
    if (levels && levels.length > 1 && levels.at(-1) === pgPid) found.push(pid);
  }
  return found;
}

/** A file as the kernel names it: its device (dev_t as the kernel encodes it, not stat's encoding) and inode. */
export interface KernelFileId {
  dev: bigint;
  ino: bigint;
}

/** A namespace as nsfs names it (what bpf_get_ns_current_pid_tgid compares). */
export type NamespaceId = KernelFileId;

/** stat() of `path` (following links), with the device as the kernel encodes dev_t (major << 20 | minor); null when it cannot be read. */
export function kernelFileId(path: string): KernelFileId | null {
  let st;
  try {
    st = statSync(path, { bigint: true });
  } catch {
    return null;
  }
  const major = (st.dev >> 8n) & 0xfffn;
  const minor = (st.dev & 0xffn) | ((st.dev >> 12n) & 0xfff00n);
  return { dev: (major << 20n) | minor, ino: st.ino };
}

/** The pid (or mount) namespace of a process; throws when it cannot be read. */
export function namespaceOf(procPid: number | 'self', kind: 'pid' | 'mnt'): NamespaceId {
  const id = kernelFileId(`/proc/${procPid}/ns/${kind}`);
  if (!id) throw new Error(`cannot read /proc/${procPid}/ns/${kind}`);
  return id;
}

/** Whether a process sees the same files at the same paths as we do (same mount namespace). */
export function sameMountNamespace(procPid: number): boolean {
  try {
    return namespaceOf(procPid, 'mnt').ino === namespaceOf('self', 'mnt').ino;
  } catch {
    return false;
  }
}
