/**
 * Typed access to the native addon (native/build/Release/bpf_native.node).
 *
 * The addon is a thin mirror of libbpf 1.1: it opens, configures, loads and attaches BPF
 * objects and reads their maps. It has no knowledge of metrics; validation, defaults and
 * decoding live in TypeScript. This is the only module that loads the addon.
 *
 * Errors thrown by the addon are {@link NativeError}s: `errno` (positive) and `code`
 * ('ENOENT', ... or 'E<n>') are set, and the message names the failing libbpf call, its
 * subject and strerror, followed by the libbpf log lines printed during the call (for a
 * failed load: the last ~40 lines, i.e. the tail of the verifier log), which are also its
 * `log`. Wrong argument types throw a plain TypeError.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { UserError } from '../errors.js';
import { packageRoot } from '../package-root.js';

/** A program of a {@link BpfObject}, as listed by `programs()`. */
export interface ProgramInfo {
  name: string;
  /** ELF section, e.g. 'tp_btf/sched_switch'. */
  section: string;
  /** enum bpf_prog_type (e.g. 5 = TRACEPOINT, 7 = PERF_EVENT, 26 = TRACING). */
  type: number;
  /** Whether load() will load it; see {@link BpfObject.setAutoload}. */
  autoload: boolean;
}

/** A map of a {@link BpfObject}, as listed by `maps()`. Internal maps are named '<obj>.rodata' etc. */
export interface MapInfo {
  name: string;
  /** enum bpf_map_type: see MapType. */
  type: number;
  keySize: number;
  /** Size of one value (for per-CPU maps: one CPU's value). */
  valueSize: number;
  maxEntries: number;
}

/** enum bpf_map_type (uapi/linux/bpf.h), the types the collector's maps have. */
export const MapType = { HASH: 1, ARRAY: 2, PERCPU_HASH: 5, PERCPU_ARRAY: 6, LRU_HASH: 9, LRU_PERCPU_HASH: 10 } as const;

/** Whether a map of this type keeps one value per possible CPU. */
export function perCpuMap(type: number): boolean {
  return type === MapType.PERCPU_HASH || type === MapType.PERCPU_ARRAY || type === MapType.LRU_PERCPU_HASH;
}

/** A variable of the object's `.rodata` section (a `const volatile` global). */
export interface RodataVar {
  name: string;
  /** Byte offset inside .rodata, as expected by {@link BpfObject.setRodata}. */
  offset: number;
  size: number;
}

export type FieldKind = 'int' | 'array' | 'pointer' | 'enum' | 'other';

/**
 * One flattened field of a map key or value, from BTF.
 *
 * Nested struct/union members are named 'outer.inner' (members of anonymous structs/unions
 * keep their own name); a key/value that is a plain scalar gives one field named ''.
 * Typedefs and const/volatile are resolved.
 */
export interface Field {
  name: string;
  /** Bytes from the start of the key/value. */
  offset: number;
  /** Bytes. */
  size: number;
  /** 'array' only for arrays of integers; other arrays are 'other' (with count/elemSize). */
  kind: FieldKind;
  /** Integer (or array element, or enum) signedness. */
  signed: boolean;
  /** Arrays: number of elements. */
  count?: number;
  /** Arrays: bytes per element. */
  elemSize?: number;
  /** Bitfields (kind 'other'): first bit within the byte at `offset` (little-endian). */
  bitOffset?: number;
  /** Bitfields (kind 'other'): width in bits. */
  bitSize?: number;
}

/** Layout of a map's key and value (for per-CPU maps: the value of ONE CPU). */
export interface MapLayout {
  key: Field[];
  value: Field[];
}

/** All entries of a map, as read by {@link BpfObject.mapLookupBatch}. */
export interface MapBatch {
  /** `count * keySize` bytes. */
  keys: Buffer;
  /** `count * valueSize` bytes. */
  values: Buffer;
  count: number;
  keySize: number;
  /**
   * Stride of one entry in `values`: the map's value size, or for per-CPU maps
   * `roundup(value_size, 8) * numPossibleCpus()` (CPU i's value at `i * roundup(value_size, 8)`).
   */
  valueSize: number;
}

/** Options of {@link BpfObject.attachPerfEvent} (fields of struct perf_event_attr). */
export interface PerfEventOptions {
  /** PERF_TYPE_* (0 = HARDWARE, 1 = SOFTWARE, ...). */
  type: number;
  /** Event within the type, e.g. PERF_COUNT_SW_CPU_CLOCK = 0. */
  config: number | bigint;
  /** Run the program every N events. Exclusive with sampleFreq. */
  samplePeriod?: number | bigint;
  /** Run the program N times per second. Exclusive with samplePeriod. */
  sampleFreq?: number | bigint;
  /** CPU to open the event on (one CPU per call). */
  cpu: number;
  /** Process to follow; default -1 (all processes on `cpu`). */
  pid?: number;
}

/** Result of {@link BpfNative.probePerfEvent}. */
export interface PerfEventProbe {
  ok: boolean;
  /** perf_event_open's errno when !ok (e.g. 2 = ENOENT: no such PMU/event), else 0. */
  errno: number;
}

/**
 * An attachment (struct bpf_link).
 *
 * Detached by {@link BpfLink.destroy}. A BpfLink that becomes unreachable without being
 * destroyed is detached when the garbage collector finalizes it, so keep a reference for as
 * long as the program should stay attached (or pin it). A link stays attached after its
 * BpfObject is closed.
 *
 * @example
 * const link = obj.attach('on_switch');
 * try { await sleep(1000); } finally { link.destroy(); }
 */
export interface BpfLink {
  /** Detaches and frees the link. Idempotent. */
  destroy(): void;
  /** Pins the link in bpffs (it then survives this process). Not for USDT links (EOPNOTSUPP). */
  pin(path: string): void;
  /** Removes the pin created by pin(). */
  unpin(): void;
  /** The BPF link fd (owned by the link; do not close). Not for USDT links (EOPNOTSUPP). */
  fd(): number;
}

/**
 * A BPF object file (struct bpf_object): open, configure, load, attach, read maps.
 *
 * Configuration (setAutoload, setMaxEntries, reuseMapFd, setRodata) only works before load(); load()
 * can be called once (a failed load leaves the object usable only for close()). Program and
 * map names are the C names; internal maps can be named '.rodata' or as listed by maps().
 *
 * @example
 * const { BpfObject } = loadNative();
 * const obj = new BpfObject('build/bpf/stats.bpf.o');
 * const v = obj.rodata().find((r) => r.name === 'cfg_tag')!;
 * obj.setRodata(v.offset, Buffer.from(new Uint32Array([7]).buffer));
 * obj.load();
 * const link = obj.attachTracepoint('on_getppid', 'syscalls', 'sys_enter_getppid');
 * const { keys, values, count } = obj.mapLookupBatch('counts');
 * link.destroy();
 * obj.close();
 */
export interface BpfObject {
  programs(): ProgramInfo[];
  maps(): MapInfo[];
  /** Whether load() loads `prog` (bpf_program__set_autoload). Before load only. */
  setAutoload(prog: string, on: boolean): void;
  /** bpf_map__set_max_entries. Before load only. */
  setMaxEntries(map: string, n: number): void;
  /**
   * bpf_program__set_attach_target(prog, 0, target): attach to `target` rather than what the
   * section names (for tp_btf: another tracepoint, whose prototype the verifier then checks the
   * program's argument accesses against). Before load only.
   */
  setAttachTarget(prog: string, target: string): void;
  /**
   * Makes `map` the map behind `fd` (another loaded object's mapFd(), dup'ed), so that this
   * object's programs share it: bpf_map__reuse_fd. Its size, flags and contents are that map's.
   * Before load only.
   */
  reuseMapFd(map: string, fd: number): void;
  /** Variables of the `.rodata` DATASEC (empty if none). */
  rodata(): RodataVar[];
  /**
   * Overwrites `bytes.length` bytes of .rodata's initial value at `offset` (native byte order).
   * Before load only; throws ERANGE when out of range.
   */
  setRodata(offset: number, bytes: Buffer): void;
  /** bpf_object__load. On failure the message ends with the verifier log tail. */
  load(): void;
  /**
   * Closes the object (idempotent). Links already created stay attached until destroyed; the
   * native object is released once it is closed and all its links are destroyed.
   */
  close(): void;

  /** Auto-attach by section (tp_btf/..., tracepoint/..., raw_tp/..., uprobe/..., usdt/...). */
  attach(prog: string): BpfLink;
  attachTracepoint(prog: string, category: string, name: string): BpfLink;
  attachRawTracepoint(prog: string, name: string): BpfLink;
  /**
   * Attaches a SEC("usdt") program to every call site of `provider:name` in `binaryPath`.
   * pid -1 = all processes, 0 = this process. `cookie` is readable with bpf_usdt_cookie().
   */
  attachUsdt(prog: string, pid: number, binaryPath: string, provider: string, name: string, cookie?: bigint): BpfLink;
  /**
   * Attaches a uprobe (or uretprobe) at `funcName + offset` in `binaryPath`, or at file
   * offset `offset` when funcName is null. pid -1 = all processes.
   */
  attachUprobe(prog: string, retprobe: boolean, pid: number, binaryPath: string, funcName: string | null, offset: number): BpfLink;
  /** perf_event_open() on one CPU, then bpf_program__attach_perf_event. The link owns the perf fd. */
  attachPerfEvent(prog: string, opts: PerfEventOptions): BpfLink;

  /** Key/value layout from BTF (available before load). */
  mapLayout(map: string): MapLayout;
  /**
   * Value for `key`, or null when absent. For per-CPU maps the buffer holds every possible
   * CPU's value, each padded to 8 bytes: `roundup(valueSize, 8) * numPossibleCpus()` bytes.
   */
  mapLookup(map: string, key: Buffer): Buffer | null;
  /** Copies `into.length` bytes of the loaded .bss at `offset` into `into`, from its mmapped memory (no syscall). */
  readBss(offset: number, into: Buffer): void;
  /** Writes `from` into the loaded .bss at `offset`, in its mmapped memory: that variable only (a 4- or 8-byte aligned one in one store), nothing the programs wrote elsewhere. */
  writeBss(offset: number, from: Buffer): void;
  /** bpf_map__update_elem; `flags` BPF_ANY (0, default) / BPF_NOEXIST (1) / BPF_EXIST (2). Per-CPU values as in mapLookup. */
  mapUpdate(map: string, key: Buffer, value: Buffer, flags?: number): void;
  /** Returns false when the key was absent. */
  mapDelete(map: string, key: Buffer): boolean;
  /**
   * Deletes `key` and returns the value it had at that moment (per-CPU maps as in mapLookup),
   * or null when absent: nothing a program adds between a read and the delete is lost.
   */
  mapLookupAndDelete(map: string, key: Buffer): Buffer | null;
  /**
   * Reads the whole map (BPF_MAP_LOOKUP_BATCH in chunks of `batchSize`, default 256; falls back
   * to key iteration for map types without batch support). Not an atomic snapshot: entries
   * changed concurrently may be seen old or new.
   */
  mapLookupBatch(map: string, batchSize?: number): MapBatch;
  /**
   * Reads and deletes every entry (BPF_MAP_LOOKUP_AND_DELETE_BATCH, chunks of `batchSize`): an
   * entry a program adds meanwhile is either returned or stays for the next call. Throws where
   * the map type has no such op.
   */
  mapLookupAndDeleteBatch(map: string, batchSize?: number): MapBatch;
  /** The entries of the first `count` keys of `keys` (packed, keySize each), one lookup each; absent keys are left out. */
  mapLookupKeys(map: string, keys: Buffer, count: number): MapBatch;
  /** Deletes the first `count` keys of `keys` (packed, keySize each); absent keys are skipped. Returns how many were deleted. */
  mapDeleteBatch(map: string, keys: Buffer, count: number): number;
  /** The map fd (owned by the object; do not close). After load only. */
  mapFd(map: string): number;
  pinMap(map: string, path: string): void;
  /** Removes the pin at `path` (default: the path given to pinMap). */
  unpinMap(map: string, path?: string): void;
}

export interface BpfObjectConstructor {
  /** bpf_object__open_file(path). */
  new (path: string): BpfObject;
  readonly prototype: BpfObject;
}

/** Links come from BpfObject.attach*(); the class is exported for `instanceof` only. */
export interface BpfLinkConstructor {
  readonly prototype: BpfLink;
}

/** The addon's exports. */
export interface BpfNative {
  BpfObject: BpfObjectConstructor;
  BpfLink: BpfLinkConstructor;
  /** libbpf_num_possible_cpus(): the CPU count per-CPU map values are laid out for. */
  numPossibleCpus(): number;
  /** Returns freed heap memory to the kernel (glibc malloc_trim); true when some was. */
  releaseFreeMemory(): boolean;
  /** libbpf's "major.minor", e.g. "1.1". */
  libbpfVersion(): string;
  /**
   * libbpf warning/info messages (one entry per line) printed since the previous call.
   * Bounded: only the most recent ~500 lines are kept. Debug messages are not captured.
   */
  drainLog(): string[];
  /** libbpf_probe_bpf_prog_type(type): whether the kernel can load programs of that type. */
  probeProgType(type: number): boolean;
  /** Whether perf_event_open(type, config) works for this process on any CPU (e.g. hardware PMU present). */
  probePerfEvent(type: number, config: number | bigint): PerfEventProbe;
  /**
   * bpf_enable_stats(BPF_STATS_RUN_TIME): run-time stats are collected while the returned fd
   * is open. Close it with fs.closeSync(fd).
   */
  bpfStatsEnable(): number;
}

/** An Error thrown by the addon for a failed system/libbpf call. */
export interface NativeError extends Error {
  errno: number;
  code: string;
  /** The libbpf lines the message quotes (for a failed load: the verifier log's tail), one per entry. */
  log?: string[];
}

/** True for errors thrown by the addon (as opposed to TypeErrors for bad arguments). */
export function isNativeError(e: unknown): e is NativeError {
  return (
    e instanceof Error && typeof (e as Partial<NativeError>).errno === 'number' && typeof (e as Partial<NativeError>).code === 'string'
  );
}

/** Where a hand-made build of native/ lands (node-gyp rebuild --directory native). */
function handBuiltAddonPath(): string {
  return join(packageRoot(), 'native', 'build', 'Release', 'bpf_native.node');
}

/**
 * Absolute path of the addon this process loads: a hand-made build of native/ when there is
 * one, else the prebuild for this platform (prebuilds/<platform>-<arch>/, made by prebuildify
 * at `npm run build` and shipped in the npm package; one N-API build serves every Node
 * version). Throws a UserError saying what to do when there is neither.
 */
export function nativeAddonPath(): string {
  const handBuilt = handBuiltAddonPath();
  if (existsSync(handBuilt)) return handBuilt;
  const require = createRequire(import.meta.url);
  const nodeGypBuild = require('node-gyp-build') as { path(dir: string): string };
  try {
    return nodeGypBuild.path(packageRoot());
  } catch {
    throw new UserError(
      `the native addon for ${process.platform}-${process.arch} is missing (no prebuilds/${process.platform}-${process.arch}/*.node in ${packageRoot()}): ` +
        'install pg-bpf-stats from its npm package, which ships it, or build it with npm run build (needs a C++ compiler and libbpf-dev)',
    );
  }
}

let cached: BpfNative | undefined;

/**
 * Loads the addon (once) and returns its typed exports.
 *
 * @throws UserError when the addon is missing or cannot be loaded (e.g. libbpf.so.1 absent):
 *   one line naming what to install.
 * @example
 * const bpf = loadNative();
 * console.log(bpf.libbpfVersion(), bpf.numPossibleCpus());
 */
export function loadNative(): BpfNative {
  if (cached) return cached;
  const path = nativeAddonPath();
  const require = createRequire(import.meta.url);
  try {
    cached = require(path) as BpfNative;
  } catch (error) {
    const missing = /(lib[\w.+-]+\.so[\d.]*): cannot open shared object file/.exec((error as Error).message)?.[1];
    throw new UserError(
      missing
        ? `cannot load ${path}: ${missing} is missing: install the runtime libraries ${RUNTIME_LIBRARIES} (README, "Install")`
        : `cannot load ${path}: ${(error as Error).message.split('\n')[0]}`,
    );
  }
  return cached;
}

/** The shared libraries the addon links against, as Debian/Ubuntu name their packages. */
export const RUNTIME_LIBRARIES = 'libbpf1 (libbpf.so.1, 1.1 or newer), libelf1 (libelf1t64 from Debian 13) and zlib1g';
