import { CounterIndex } from './contract.js';

type CounterMember = Exclude<keyof typeof CounterIndex, 'COUNTER_MAX'>;
type NameOf<Member> = Member extends `COUNTER_${infer Name}` ? Lowercase<Name> : never;

/**
 * A BPF overflow or failure counter, by its name in bpf_stats.health.dropped: the member of
 * enum counter_index (bpf/records.h) in lower case, without COUNTER_ (e.g. 'queries_full').
 */
export type CounterName = NameOf<CounterMember>;

/**
 * The counters of something not counted (bpf_stats.health.dropped): all but query_changes_full
 * and hist_changes_full, where nothing is lost (that flush read the whole queries or histograms
 * map; health.map_fill shows it), and query_key_held (a refused key's figures held and written
 * by the next flush; health.map_fill->'queries'->'held').
 */
export type DroppedCounterName = Exclude<CounterName, 'query_changes_full' | 'hist_changes_full' | 'query_key_held'>;

/** Every counter with its index in the `counters` map (COUNTER_MAX is the map's size, not a counter). */
export const COUNTERS: ReadonlyArray<{ name: CounterName; index: number }> = Object.entries(CounterIndex)
  .filter(([, index]) => index !== CounterIndex.COUNTER_MAX)
  .map(([member, index]) => ({ name: member.slice('COUNTER_'.length).toLowerCase() as CounterName, index }));
