import { readFileSync } from 'node:fs';
import type { CollectorBpfObject } from '../bpf/collector-bpf-object.js';
import { RecordLayout } from '../bpf/record-layout.js';
import { CLOCK_TICKS, procStat } from '../postmaster/proc-stat.js';

/**
 * Marks exited, as of now, every tracked process that is gone (or a zombie) although BPF never
 * saw its final switch: it exited while the probes were detached. The next flush closes it.
 *
 * @example
 * object.probes.resume(sets); // calls markExitedWhilePaused(object, procShowsPgPids) once attached again
 */
export function markExitedWhilePaused(object: CollectorBpfObject, procShowsPgPids: boolean): void {
  const batch = object.mapLookupBatch('backends');
  const layout = RecordLayout.of('backend_record', object.mapLayout('backends').value);
  const exited = layout.field('exited_ns');
  const now = process.hrtime.bigint();
  const offset = bootMinusMonotonicNs();
  for (let i = 0; i < batch.count; i++) {
    const at = i * batch.valueSize;
    if (layout.int(batch.values, at, 'exited_ns') !== 0n) continue;
    // /proc inside the postmaster's pid namespace knows the process by its pid there.
    const pid = procShowsPgPids ? layout.intNumber(batch.values, at, 'pg_pid') : batch.keys.readUInt32LE(i * batch.keySize);
    const taskStartNs = layout.int(batch.values, at, 'task_start_ns');
    if (sameProcess(pid, taskStartNs, offset)) continue;
    // The record as it is now, not as the batch read it (a live one keeps changing until its
    // last switch), and only if it is still there: BPF may have retired it to exited_backends
    // meanwhile, and writing it back would make a stale second copy.
    const key = batch.keys.subarray(i * batch.keySize, (i + 1) * batch.keySize);
    const value = object.mapLookup('backends', key);
    if (!value || layout.int(value, 0, 'task_start_ns') !== taskStartNs || layout.int(value, 0, 'exited_ns') !== 0n) continue;
    value.writeBigUInt64LE(now, exited.offset);
    try {
      object.mapUpdate('backends', key, value, BPF_EXIST);
    } catch {
      // Retired between the lookup and this update: BPF saw its last switch after all.
    }
  }
}

/** bpf_map_update_elem's flag: update an existing element only. */
const BPF_EXIST = 2;

/**
 * Whether `pid` is still the live process that started at `taskStartNs` (task->start_time,
 * CLOCK_MONOTONIC): /proc/<pid>/stat counts its start in clock ticks since boot, so the two
 * agree to a tick or two once the time the machine was suspended is added. A zombie counts as
 * gone: it may still make its final context switch (exit_notify() comes before it), and if BPF
 * sees that switch it retires the record first; if not (paused), the mark here closes it.
 */
function sameProcess(pid: number, taskStartNs: bigint, bootMinusMonotonicNs: bigint): boolean {
  const stat = procStat(pid);
  if (!stat || stat.state === 'Z' || stat.state === 'X') return false;
  const tickNs = BigInt(1e9 / CLOCK_TICKS);
  const difference = BigInt(stat.startTicks) * tickNs - (taskStartNs + bootMinusMonotonicNs);
  return difference > -3n * tickNs && difference < 3n * tickNs;
}

/** CLOCK_BOOTTIME - CLOCK_MONOTONIC (time suspended), to 10 ms: /proc/uptime is boot-based. */
function bootMinusMonotonicNs(): bigint {
  const uptimeNs = BigInt(Math.round(Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * 1e3)) * 1_000_000n;
  return uptimeNs - process.hrtime.bigint();
}
