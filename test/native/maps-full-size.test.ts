import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CollectorBpfObject } from '../../src/bpf/collector-bpf-object.js';
import type { MapName } from '../../src/bpf/contract.js';
import { mapsFullBytes } from '../../src/capabilities/memory-limit.js';
import { collectorObjectPath } from '../../src/collector/collector-object.js';
import { loadNative, perCpuMap } from '../../src/native/bpf-native.js';

/*
 * `check`'s estimate of the maps' kernel memory when full (mapsFullBytes), against the kernel's
 * own figure: a map's fdinfo `memlock` is its memory use (map_mem_usage, Linux 6.4+), for the
 * elements it holds. Each map of the collector object with a capacity of its own (small here,
 * so the test fills them quickly) is filled to capacity and compared.
 */
const CAPACITY = 512;
const cpus = loadNative().numPossibleCpus();
let object: CollectorBpfObject;

/** The sized maps of each layout the estimate knows: per-CPU hash (queries, histograms), hash (backends, query_changes). */
const FILLED: MapName[] = ['queries', 'histograms', 'backends', 'query_changes'];

beforeAll(() => {
  object = new (loadNative().BpfObject)(collectorObjectPath()) as CollectorBpfObject;
  for (const program of object.programs()) object.setAutoload(program.name as never, false);
  for (const map of FILLED) object.setMaxEntries(map, CAPACITY);
  object.load();
});

afterAll(() => object?.close());

function memlock(map: MapName): number {
  const fdinfo = readFileSync(`/proc/self/fdinfo/${object.mapFd(map)}`, 'utf8');
  const match = /^memlock:\s+(\d+)$/m.exec(fdinfo);
  expect(match, `memlock in the fdinfo of ${map}`).not.toBeNull();
  return Number(match![1]);
}

describe('the maps when full, as check estimates them', () => {
  it.each(FILLED)("%s: at most the kernel's own memlock once every element is there, and not 15 percent under", (name) => {
    const info = object.maps().find((m) => m.name === name)!;
    expect(info.maxEntries).toBe(CAPACITY);
    const value = Buffer.alloc(perCpuMap(info.type) ? Math.ceil(info.valueSize / 8) * 8 * cpus : info.valueSize);
    for (let i = 0; i < CAPACITY; i++) {
      const key = Buffer.alloc(info.keySize);
      key.writeUInt32LE(i + 1);
      object.mapUpdate(name, key, value);
    }
    const kernel = memlock(name);
    const estimate = mapsFullBytes([info], cpus);
    // The kernel adds the table's own struct, and free-list links of elements allocated on demand.
    expect(estimate / kernel, `${name}: estimate ${estimate}, kernel ${kernel}`).toBeGreaterThan(0.85);
    expect(estimate / kernel, `${name}: estimate ${estimate}, kernel ${kernel}`).toBeLessThanOrEqual(1.0);
  });
});
