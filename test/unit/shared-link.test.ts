import { describe, expect, it } from 'vitest';
import { SharedLinks } from '../../src/collector/shared-link.js';
import type { BpfLink } from '../../src/native/bpf-native.js';

/** A link that records what happened to it. */
function recordingLink(events: string[], name: string): BpfLink {
  return {
    destroy: () => events.push(`destroy ${name}`),
    pin: () => events.push(`pin ${name}`),
    unpin: () => events.push(`unpin ${name}`),
    fd: () => 7,
  };
}

describe('SharedLinks', () => {
  it('attaches a program once for every set that shares it and detaches it with the last share', () => {
    const events: string[] = [];
    const shared = new SharedLinks();
    let attaches = 0;
    const attach = () => {
      attaches++;
      events.push('attach');
      return recordingLink(events, `link ${attaches}`);
    };
    const query = shared.share('statement-end:on_query_done', attach);
    const nested = shared.share('statement-end:on_query_done', attach);
    expect(attaches).toBe(1);
    expect(nested.fd()).toBe(7);
    query.destroy();
    query.destroy(); // idempotent: one share released once
    expect(events).toEqual(['attach']);
    nested.destroy();
    expect(events).toEqual(['attach', 'destroy link 1']);
    // Attached again after the last share went: a new link.
    shared.share('statement-end:on_query_done', attach).destroy();
    expect(events).toEqual(['attach', 'destroy link 1', 'attach', 'destroy link 2']);
  });

  it('keeps different programs apart', () => {
    const events: string[] = [];
    const shared = new SharedLinks();
    const a = shared.share('a', () => recordingLink(events, 'a'));
    const b = shared.share('b', () => recordingLink(events, 'b'));
    a.destroy();
    expect(events).toEqual(['destroy a']);
    b.destroy();
    expect(events).toEqual(['destroy a', 'destroy b']);
  });
});
