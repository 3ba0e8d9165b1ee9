import type { Activity } from '../collector/map-samples.js';

/**
 * Ends a periodic flush that would write nothing before it reads any map. A full flush reads and
 * decodes every map (a few milliseconds of CPU, each second, on a server doing nothing); the
 * programs note every change a flush could write (bpf/activity.bpf.h), so one small read tells
 * whether anything happened since the last full flush's snapshot. The tick is quiet when nothing
 * was noted, the busy time noted would still let the backend rows wait, and the caller has no
 * work of its own due (a heartbeat, retention, rows or texts left for later): `settled`.
 *
 * A full flush sets the mark (read before its snapshot, so a change racing the snapshot is seen
 * again, never missed); a failed one clears it, so the next tick is a full flush.
 *
 * @example
 * const gate = new IdleGate(() => object.maps.readActivity(), (busyNs) => rows.wouldWriteNothing(busyNs) && !health.due());
 * if (lazy && gate.quiet()) return;
 * const mark = gate.read();
 * // ... snapshot and write ...
 * gate.flushed(mark); // or gate.flushed(null) when the flush failed
 */
export class IdleGate {
  private mark: Activity | null = null;
  /** Ticks that ended here since start. */
  quietTicks = 0;

  constructor(
    private readonly readActivity: () => Activity,
    /** Whether a flush would write nothing, given the busy time noted since the mark. */
    private readonly settled: (busyNsSinceMark: bigint) => boolean,
  ) {}

  read(): Activity {
    return this.readActivity();
  }

  /** After a full flush: `mark` is what read() returned before its snapshot, null when it failed. */
  flushed(mark: Activity | null): void {
    this.mark = mark;
  }

  /** Whether this periodic tick can end without a flush. */
  quiet(): boolean {
    if (!this.mark) return false;
    const now = this.readActivity();
    if (now.changes !== this.mark.changes || !this.settled(now.busyNs - this.mark.busyNs)) return false;
    this.quietTicks++;
    return true;
  }
}
