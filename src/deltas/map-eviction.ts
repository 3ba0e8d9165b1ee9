/**
 * Deleting quiet entries from one BPF map, each with what it held at that moment
 * (BPF_MAP_LOOKUP_AND_DELETE_ELEM; MapReaders), turned off with one line the first time the
 * kernel refuses it (hash maps before Linux 5.14). The map then keeps its entries, bounded, and
 * counts what it refuses when full in its *_full counter, as it did before eviction.
 *
 * @example
 * const eviction = new MapEviction('histograms', (keys) => object.maps.evictHistograms(keys), log);
 * const held = eviction.delete(keys); // null: nothing was deleted
 */
export class MapEviction<Value> {
  constructor(
    private readonly map: string,
    private evict: ((rawKeys: Buffer[]) => Array<Value | null>) | undefined,
    private readonly log?: (line: string) => void,
  ) {}

  /** Whether entries are deleted at all (configured, and the kernel has not refused it). */
  get enabled(): boolean {
    return this.evict !== undefined;
  }

  /** What each of `rawKeys` held when deleted (null for one already gone); null when nothing was deleted. */
  delete(rawKeys: Buffer[]): Array<Value | null> | null {
    if (!this.evict || !rawKeys.length) return null;
    try {
      return this.evict(rawKeys);
    } catch (error) {
      this.log?.(
        `cannot evict from the ${this.map} map on this kernel, a full ${this.map} map stays full: ${error instanceof Error ? error.message : String(error)}`,
      );
      this.evict = undefined;
      return null;
    }
  }
}
