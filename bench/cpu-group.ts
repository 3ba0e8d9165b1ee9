import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';

const CPUACCT = '/sys/fs/cgroup/cpuacct';

/** Every thread's on-CPU nanoseconds of a process. */
export function processCpuNs(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread exited meanwhile.
    }
  }
  return ns;
}

/** The postmaster and every process it forked. */
export function clusterPids(postmaster: number): number[] {
  const pids = [postmaster];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === postmaster) pids.push(Number(entry));
    } catch {
      // Gone.
    }
  }
  return pids;
}

/**
 * A cgroup v1 cpuacct group for a measurement: cpuacct.usage counts every nanosecond its
 * processes and the children they fork later ran, exited ones included.
 */
export class CpuGroup {
  readonly path = `${CPUACCT}/pg-bpf-stats-bench-${process.pid}`;
  constructor() {
    if (!existsSync(`${CPUACCT}/cpuacct.usage`)) throw new Error(`no cgroup v1 cpuacct controller at ${CPUACCT}`);
    mkdirSync(this.path, { recursive: true });
  }
  add(pid: number): void {
    try {
      writeFileSync(`${this.path}/cgroup.procs`, `${pid}\n`);
    } catch {
      // Exited meanwhile.
    }
  }
  usageNs(): number {
    return Number(readFileSync(`${this.path}/cpuacct.usage`, 'utf8'));
  }
  remove(): void {
    // Anything still inside goes back to the root group first.
    for (const pid of readFileSync(`${this.path}/cgroup.procs`, 'utf8').split('\n').filter(Boolean)) {
      try {
        writeFileSync(`${CPUACCT}/cgroup.procs`, `${pid}\n`);
      } catch {
        // Gone.
      }
    }
    rmdirSync(this.path);
  }
}
