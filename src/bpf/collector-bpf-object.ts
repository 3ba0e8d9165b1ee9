import type { BpfLink, BpfObject, MapBatch, MapLayout, PerfEventOptions } from '../native/bpf-native.js';
import type { MapName, ProgramName } from './contract.js';

/**
 * libbpf's own name for the object's .bss map (a global variable section, not a map of bpf/):
 * ObjectGlobals reads and writes the run-time globals through it.
 */
export const BSS_MAP = '.bss';

/**
 * The native object as the collector uses it: every map and program named as the contract
 * generated from the object's BTF names it (src/bpf/contract.ts), so a name bpf/ does not
 * have, or no longer has, is a compile error rather than an ENOENT at attach time. The
 * binding itself stays generic (it also loads test objects); this only narrows its names.
 *
 * @example
 * const object: CollectorBpfObject = new (loadNative().BpfObject)(collectorObjectPath());
 * object.mapLookupBatch('queries'); // 'querys' would not compile
 */
export interface CollectorBpfObject extends BpfObject {
  setAutoload(prog: ProgramName, on: boolean): void;
  setMaxEntries(map: MapName, n: number): void;
  attach(prog: ProgramName): BpfLink;
  attachUsdt(prog: ProgramName, pid: number, binaryPath: string, provider: string, name: string, cookie?: bigint): BpfLink;
  attachUprobe(prog: ProgramName, retprobe: boolean, pid: number, binaryPath: string, funcName: string | null, offset: number): BpfLink;
  attachPerfEvent(prog: ProgramName, opts: PerfEventOptions): BpfLink;
  mapLayout(map: MapName | typeof BSS_MAP): MapLayout;
  mapLookup(map: MapName | typeof BSS_MAP, key: Buffer): Buffer | null;
  mapUpdate(map: MapName | typeof BSS_MAP, key: Buffer, value: Buffer, flags?: number): void;
  mapDelete(map: MapName, key: Buffer): boolean;
  mapLookupAndDelete(map: MapName, key: Buffer): Buffer | null;
  mapLookupBatch(map: MapName, batchSize?: number): MapBatch;
  mapLookupAndDeleteBatch(map: MapName, batchSize?: number): MapBatch;
  mapLookupKeys(map: MapName, keys: Buffer, count: number): MapBatch;
  mapDeleteBatch(map: MapName, keys: Buffer, count: number): number;
}
