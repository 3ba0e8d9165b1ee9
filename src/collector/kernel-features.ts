import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import { gunzipSync } from 'node:zlib';
import { readFileRange } from '../file-range.js';

const VMLINUX_BTF = '/sys/kernel/btf/vmlinux';

/**
 * What this kernel offers that BPF programs depend on, read once: which tracepoints a tp_btf
 * program can attach to (the kernel's BTF has a `btf_trace_<name>` typedef for each), and the
 * tick rate (CONFIG_HZ), which turns jiffies in tracepoint arguments into time.
 *
 * @example
 * const kernel = KernelFeatures.host();
 * kernel.hasTracepoint('block_io_start'); // false before Linux 6.5
 * kernel.hz(); // 250
 */
export class KernelFeatures {
  private static cached: KernelFeatures | undefined;
  private hzValue: number | null | undefined;
  /** The tracepoints the BTF names; kept instead of the BTF itself, which is megabytes the collector would hold for its whole life. */
  private readonly tracepoints: ReadonlySet<string>;

  /** `btfStrings`: the kernel BTF's string section (or the whole BTF, which holds it). */
  constructor(
    btfStrings: Buffer,
    private readonly readConfig: () => string | null = kernelConfig,
  ) {
    this.tracepoints = tracepointNames(btfStrings);
  }

  /** The running kernel (memoized). */
  static host(): KernelFeatures {
    KernelFeatures.cached ??= new KernelFeatures(existsSync(VMLINUX_BTF) ? btfStringSection(VMLINUX_BTF) : Buffer.alloc(0));
    return KernelFeatures.cached;
  }

  /** Whether a tp_btf program can attach to tracepoint `name`. */
  hasTracepoint(name: string): boolean {
    return this.tracepoints.has(name);
  }

  /** The first of `names` this kernel lacks, or null when it has them all. */
  missingTracepoint(names: readonly string[]): string | null {
    return names.find((n) => !this.hasTracepoint(n)) ?? null;
  }

  /** CONFIG_HZ from the kernel's config, else measured from /proc/timer_list; null if neither works. */
  hz(): number | null {
    if (this.hzValue === undefined) this.hzValue = hzFromConfig(this.readConfig()) ?? hzFromTimerList();
    return this.hzValue;
  }
}

/**
 * The string section of a BTF file, read by itself: the types before it are 60% of vmlinux's
 * 5.5 MB, and sysfs hands the file out 4 KB a read (1,350 reads for the whole, ~10 ms of a start).
 */
function btfStringSection(path: string): Buffer {
  const fd = openSync(path, 'r');
  try {
    const header = readFileRange(fd, 0, 24);
    if (header.length < 24 || header.readUInt16LE(0) !== 0xeb9f) return readFileSync(path);
    // struct btf_header: magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
    return readFileRange(fd, header.readUInt32LE(4) + header.readUInt32LE(16), header.readUInt32LE(20));
  } finally {
    closeSync(fd);
  }
}

/** The `<name>` of every `btf_trace_<name>` typedef: type names live NUL-terminated in the BTF string section. */
function tracepointNames(btf: Buffer): Set<string> {
  const names = new Set<string>();
  const prefix = Buffer.from('\0btf_trace_');
  for (let at = btf.indexOf(prefix); at >= 0; at = btf.indexOf(prefix, at + 1)) {
    const start = at + prefix.length;
    const end = btf.indexOf(0, start);
    if (end < 0) break;
    names.add(btf.toString('latin1', start, end));
  }
  return names;
}

/** The kernel config where libbpf looks for it too: /boot/config-<release>, /proc/config.gz. */
function kernelConfig(): string | null {
  const boot = `/boot/config-${release()}`;
  try {
    if (existsSync(boot)) return readFileSync(boot, 'utf8');
    if (existsSync('/proc/config.gz')) return gunzipSync(readFileSync('/proc/config.gz')).toString('utf8');
  } catch {
    // unreadable: fall through to measuring
  }
  return null;
}

function hzFromConfig(config: string | null): number | null {
  const m = config?.match(/^CONFIG_HZ=(\d+)$/m);
  return m ? Number(m[1]) : null;
}

/** Counts jiffies over ~100 ms of wall time and rounds to the nearest configurable HZ. */
function hzFromTimerList(): number | null {
  const jiffies = (): bigint | null => {
    try {
      const m = readFileSync('/proc/timer_list', 'utf8').match(/^jiffies: (\d+)$/m);
      return m ? BigInt(m[1]!) : null;
    } catch {
      return null;
    }
  };
  const t0 = process.hrtime.bigint();
  const j0 = jiffies();
  if (j0 === null) return null;
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  const j1 = jiffies();
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  if (j1 === null || seconds <= 0) return null;
  const measured = Number(j1 - j0) / seconds;
  return [100, 250, 300, 1000].reduce((best, hz) => (Math.abs(hz - measured) < Math.abs(best - measured) ? hz : best));
}
