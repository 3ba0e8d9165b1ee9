import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const TRACEFS = '/sys/kernel/tracing';

/** One event line of a tracefs `trace` file: the context it fired in and its formatted fields. */
export interface TraceEvent {
  comm: string;
  /** The task that was current when the event fired (not necessarily the one it is about). */
  pid: number;
  event: string;
  fields: string;
}

/**
 * A private ftrace instance (its own ring buffer) with some events enabled: ground truth from
 * the kernel's own tracing, independent of the BPF programs under test.
 *
 * @example
 * const trace = TraceInstance.create('memio', ['block/block_io_start'], 8192);
 * // ... workload
 * const events = trace.stop();
 */
export class TraceInstance {
  private constructor(private readonly dir: string) {}

  static create(name: string, events: string[], bufferKb = 4096, filters: Record<string, string> = {}): TraceInstance {
    // A fresh machine may not have tracefs mounted (we are root, as BPF needs anyway).
    if (!existsSync(join(TRACEFS, 'instances'))) execFileSync('mount', ['-t', 'tracefs', 'nodev', TRACEFS]);
    const dir = join(TRACEFS, 'instances', `${name}-${process.pid}`);
    if (!existsSync(dir)) mkdirSync(dir);
    const instance = new TraceInstance(dir);
    try {
      writeFileSync(join(dir, 'buffer_size_kb'), String(bufferKb));
      for (const event of events) {
        if (filters[event]) writeFileSync(join(dir, 'events', event, 'filter'), filters[event]!);
        writeFileSync(join(dir, 'events', event, 'enable'), '1');
      }
      writeFileSync(join(dir, 'tracing_on'), '1');
    } catch (error) {
      instance.remove();
      throw error;
    }
    return instance;
  }

  /** Stops tracing and returns the events recorded; the instance is removed. */
  stop(): TraceEvent[] {
    writeFileSync(join(this.dir, 'tracing_on'), '0');
    const events = this.events();
    this.remove();
    return events;
  }

  /** The events recorded so far (tracing goes on). */
  events(): TraceEvent[] {
    const text = readFileSync(join(this.dir, 'trace'), 'utf8');
    const events: TraceEvent[] = [];
    for (const line of text.split('\n')) {
      const m = line.match(/^\s*(.*)-(\d+)\s+\[\d+\]\s+\S+\s+[\d.]+: (\w+): (.*)$/);
      if (m) events.push({ comm: m[1]!, pid: Number(m[2]), event: m[3]!, fields: m[4]! });
    }
    return events;
  }

  remove(): void {
    try {
      writeFileSync(join(this.dir, 'tracing_on'), '0');
    } catch {
      // already gone
    }
    try {
      rmdirSync(this.dir); // tracefs disables the instance's events when it goes
    } catch {
      // already gone
    }
  }
}
