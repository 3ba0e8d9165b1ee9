/**
 * Names backends the way pg_stat_activity.backend_type does. BPF only sees the numeric
 * st_backendType, whose numbering differs between major versions, so the names are learnt
 * from live backends (pid → name from pg_stat_activity, pid → number from BPF); a process
 * that exited unseen is named by its number when that number has only ever had one name.
 *
 * @example
 * const names = new BackendTypeNames(postmasterPid);
 * names.observe(1234, 'client backend');
 * names.name({ pid: 1234, backendType: 3, identityKnown: true });
 */
export class BackendTypeNames {
  private readonly byPid = new Map<number, string>();
  private readonly byNumber = new Map<number, Set<string>>();

  constructor(private postmasterPid: number) {}

  /** The postmaster restarted (its old pid's row stays 'postmaster' only through what was written). */
  setPostmaster(pid: number): void {
    this.postmasterPid = pid;
  }

  /** Remember what pg_stat_activity says a live pid is. */
  observe(pid: number, name: string): void {
    this.byPid.set(pid, name);
  }

  knows(pid: number): boolean {
    return this.byPid.has(pid);
  }

  /** Tie a pid's learnt name to the number BPF read for it. */
  learn(pid: number, backendType: number): void {
    const name = this.byPid.get(pid);
    if (name === undefined || backendType < 0) return;
    let names = this.byNumber.get(backendType);
    if (!names) this.byNumber.set(backendType, (names = new Set()));
    names.add(name);
  }

  name(sample: { pid: number; backendType: number; identityKnown: boolean }): string {
    if (sample.pid === this.postmasterPid) return 'postmaster';
    const live = this.byPid.get(sample.pid);
    if (live !== undefined) return live;
    if (!sample.identityKnown) return 'postmaster child';
    const names = this.byNumber.get(sample.backendType);
    if (names?.size === 1) return [...names][0]!;
    if (names && names.size > 1) return 'background worker';
    return `backend type ${sample.backendType}`;
  }

  /** Drop pids that are gone, keeping memory bounded by the live process count. */
  forget(pid: number): void {
    this.byPid.delete(pid);
  }
}
