import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { release } from 'node:os';
import { gunzipSync } from 'node:zlib';
import { btfTypeTail } from '../btf-type-record.js';
import { readFileRange } from '../file-range.js';

const VMLINUX_BTF = '/sys/kernel/btf/vmlinux';

/**
 * What this kernel offers that BPF programs depend on, read once: which tracepoints a tp_btf
 * program can attach to (the kernel's BTF has a `btf_trace_<name>` typedef for each), how many
 * arguments a tracepoint passes (that typedef's prototype), and the tick rate (CONFIG_HZ),
 * which turns jiffies in tracepoint arguments into time.
 *
 * @example
 * const kernel = KernelFeatures.host();
 * kernel.hasTracepoint('block_io_start'); // false before Linux 6.5
 * kernel.tracepointArgs('sched_switch'); // 4 since Linux 5.18 (prev_state), 3 before
 * kernel.hz(); // 250
 */
export class KernelFeatures {
  private static cached: KernelFeatures | undefined;
  private hzValue: number | null | undefined;
  /**
   * The tracepoints the BTF names, each with where its typedef's name is in the string section
   * (what the typedef's record holds); kept instead of the BTF itself, which is megabytes the
   * collector would hold for its whole life.
   */
  private readonly tracepoints: ReadonlyMap<string, number>;
  private readonly args = new Map<string, number | null>();

  /**
   * `btfStrings`: the kernel BTF's string section (or the whole BTF, which holds it).
   * `readParams`: the number of parameters of the prototype a typedef (by its name's offset in
   * the string section) points to, read from the BTF's types; null when not found.
   */
  constructor(
    btfStrings: Buffer,
    private readonly readConfig: () => string | null = kernelConfig,
    private readonly readParams: (typedefNameOffset: number) => number | null = () => null,
  ) {
    this.tracepoints = tracepointNames(btfStrings);
  }

  /** The running kernel (memoized). */
  static host(): KernelFeatures {
    KernelFeatures.cached ??= existsSync(VMLINUX_BTF)
      ? new KernelFeatures(btfStringSection(VMLINUX_BTF), kernelConfig, (at) => typedefProtoParams(VMLINUX_BTF, at))
      : new KernelFeatures(Buffer.alloc(0));
    return KernelFeatures.cached;
  }

  /** Whether a tp_btf program can attach to tracepoint `name`. */
  hasTracepoint(name: string): boolean {
    return this.tracepoints.has(name);
  }

  /**
   * How many arguments tracepoint `name` passes a tp_btf program (its `btf_trace_<name>`
   * prototype's parameters, less the leading `void *__data`); null when the BTF does not say.
   * Read from the BTF's types on first asking (memoized).
   */
  tracepointArgs(name: string): number | null {
    if (!this.args.has(name)) {
      const at = this.tracepoints.get(name);
      const params = at === undefined ? null : this.readParams(at);
      this.args.set(name, params === null || params < 1 ? null : params - 1);
    }
    return this.args.get(name)!;
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

/**
 * The `<name>` of every `btf_trace_<name>` typedef, with the offset of `btf_trace_<name>` in the
 * string section: type names live NUL-terminated there.
 */
function tracepointNames(btf: Buffer): Map<string, number> {
  const names = new Map<string, number>();
  const prefix = Buffer.from('\0btf_trace_');
  for (let at = btf.indexOf(prefix); at >= 0; at = btf.indexOf(prefix, at + 1)) {
    const start = at + prefix.length;
    const end = btf.indexOf(0, start);
    if (end < 0) break;
    names.set(btf.toString('latin1', start, end), at + 1);
  }
  return names;
}

/* BTF kinds (include/uapi/linux/btf.h) whose records differ in length. */
const BTF_KIND_PTR = 2;
const BTF_KIND_TYPEDEF = 8;
const BTF_KIND_FUNC_PROTO = 13;

/** Read from the type section a chunk at a time (sysfs hands the file out 4 KB a read whatever is asked). */
const TYPE_CHUNK_BYTES = 64 * 1024;

/**
 * The number of parameters of the function prototype that the typedef named at string offset
 * `nameOffset` points to (typedef -> pointer -> prototype), from the BTF file at `path`; null
 * when there is none, or the file is not BTF this reader knows. BTF types have no index: the
 * section is walked from the start, and read only as far as the three records. On 6.18,
 * sched_switch's are 400 KB into the 3.2 MB section (10,300 records): ~1 ms to read, and ~7 ms
 * of CPU for a cold walk (interpreted before it is compiled; under 1 ms once warm).
 */
export function typedefProtoParams(path: string, nameOffset: number): number | null {
  const fd = openSync(path, 'r');
  try {
    const header = readFileRange(fd, 0, 24);
    if (header.length < 24 || header.readUInt16LE(0) !== 0xeb9f) return null;
    // struct btf_header: magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
    const start = header.readUInt32LE(4) + header.readUInt32LE(8);
    const section: TypeSection = {
      bytes: Buffer.alloc(header.readUInt32LE(12)),
      filled: 0,
      more() {
        const want = Math.min(TYPE_CHUNK_BYTES, this.bytes.length - this.filled);
        const n = want > 0 ? readSync(fd, this.bytes, this.filled, want, start + this.filled) : 0;
        this.filled += n;
        return n > 0;
      },
    };
    return protoParams(section, nameOffset);
  } finally {
    closeSync(fd);
  }
}

/** A BTF type section read so far: `bytes[0, filled)`; `more()` reads on, false at its end. */
export interface TypeSection {
  bytes: Buffer;
  filled: number;
  more(): boolean;
}

/**
 * The walk of typedefProtoParams: type ids count from 1 in the order of the records, and the
 * chain typedef -> PTR -> FUNC_PROTO is followed as soon as the records it names are read. In
 * 32-bit words (every record is a whole number of them): a Uint32Array walks ~10,000 records in
 * about a millisecond, Buffer.readUInt32LE took several.
 */
export function protoParams(section: TypeSection, nameOffset: number): number | null {
  const { bytes } = section;
  if (bytes.byteOffset % 4) return null;
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length >>> 2);
  const offsets: number[] = [0]; // offsets[id]: the word where type `id`'s record starts (id 0 is void)
  let at = 0;
  let wanted: { kind: number; id: number } | null = null; // the next record of the chain
  for (;;) {
    while (wanted && wanted.id < offsets.length) {
      const record: number = offsets[wanted.id]!;
      const info = words[record + 1]!;
      if (((info >>> 24) & 0x1f) !== wanted.kind) return null;
      if (wanted.kind === BTF_KIND_FUNC_PROTO) return info & 0xffff;
      wanted = { kind: BTF_KIND_FUNC_PROTO, id: words[record + 2]! };
    }
    const filled = section.filled >>> 2;
    if (at + 3 > filled) {
      if (!section.more()) return null;
      continue;
    }
    const info = words[at + 1]!;
    const kind = (info >>> 24) & 0x1f;
    const tail = btfTypeTail(kind, info & 0xffff);
    if (tail === null) return null;
    if (at + 3 + tail / 4 > filled) {
      if (!section.more()) return null;
      continue;
    }
    if (!wanted && kind === BTF_KIND_TYPEDEF && words[at] === nameOffset) wanted = { kind: BTF_KIND_PTR, id: words[at + 2]! };
    offsets.push(at);
    at += 3 + tail / 4;
  }
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
