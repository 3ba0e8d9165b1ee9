/** The table the IO and memory steps read: bigger than shared_buffers, on a real disk. */
export interface ColdTable {
  name: string;
  /** pg_relation_size: the ground truth for the bytes a cold scan must read. */
  bytes: number;
  /** Its data file (under 1 GB: one segment), to take out of the page cache. */
  path: string;
}

/** What the demo's steps saw from outside the collector, for the report and the test. */
export interface DemoFacts {
  cold: ColdTable;
  /** The CPU-bound backend, by /proc/<pid>/schedstat over the whole workload. */
  cpu?: { pid: number; onCpuMs: number; runDelayMs: number; slices: number };
  /** The cold scan; `skipped` says why it did not run. */
  io?: { query: string; scanMs: number } | { skipped: string };
  /** The scan inside a memory cgroup: the kernel's own counters for it. */
  memory?:
    | { query: string; pid: number; limitBytes: number; grownBytes: number; limitHits: number; expectedPages: number; scanMs: number }
    | { skipped: string };
  /** What pg_locks showed the row-lock waiter waiting for. */
  rowLock?: { locktype: string; mode: string };
  /** The insert burst, and the LWLock / Lock waits pg_stat_activity samples caught. */
  lwlock?: { query: string; sessions: number; ms: number; statements: number; sampled: Record<string, number> };
}

/** What each workload step gets. */
export interface WorkloadContext {
  dsn: string;
  /** Date.now() value the continuous steps stop at. */
  deadline: number;
  /** Prints a progress line (indented by the caller's convention: six spaces). */
  print(line: string): void;
  facts: DemoFacts;
  /** Registers undo work (a memory cgroup to remove) that must also run on SIGINT/SIGTERM. */
  onCleanup(fn: () => void): void;
}

/** A query the demo runs, and what it is meant to provoke. */
export interface WorkloadStep {
  label: string;
  run(context: WorkloadContext): Promise<void>;
}
