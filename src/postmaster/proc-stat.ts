import { readFileSync } from 'node:fs';

/** The fields of /proc/<pid>/stat the collector uses. */
export interface ProcStat {
  /** The command name (up to 15 characters). */
  comm: string;
  /** One letter: R running, S sleeping, D disk sleep, Z zombie, X dead, ... */
  state: string;
  ppid: number;
  /** Start time in clock ticks after boot. */
  startTicks: number;
  /** Where its text segment starts (mm->start_code; 0 without ptrace access to it). */
  startCode: bigint;
}

/** USER_HZ: /proc/<pid>/stat start times are in these ticks; 100 on every Linux ABI we run on. */
export const CLOCK_TICKS = 100;

/**
 * Reads /proc/<pid>/stat; null when the process does not exist (here).
 *
 * @example
 * procStat(process.pid)?.ppid;
 */
export function procStat(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name may contain spaces and parentheses: fields start after the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return {
    comm: text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')),
    state: fields[0] ?? '',
    ppid: Number(fields[1]),
    startTicks: Number(fields[19]),
    startCode: BigInt(fields[23] ?? 0),
  };
}

/** When the machine booted, in seconds since the Unix epoch (btime of /proc/stat). */
export function bootTimeSeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('btime '));
  return Number(line?.split(' ')[1] ?? 0);
}
