import type { BpfLink } from '../native/bpf-native.js';

/**
 * One BPF link that several probe sets attach (the statement end, which the query and nested
 * sets both count calls at): each set holds a share, and the link is destroyed with the last
 * share, so the program runs once per event whichever sets are attached.
 *
 * @example
 * const shared = new SharedLinks();
 * const a = shared.share('on_query_done', () => attach()); // attaches
 * const b = shared.share('on_query_done', () => attach()); // the same link
 * a.destroy(); b.destroy(); // detached with b
 */
export class SharedLinks {
  private readonly links = new Map<string, { link: BpfLink; shares: number }>();

  share(key: string, attach: () => BpfLink): BpfLink {
    let entry = this.links.get(key);
    if (!entry) {
      entry = { link: attach(), shares: 0 };
      this.links.set(key, entry);
    }
    entry.shares++;
    const held = entry;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      if (--held.shares === 0) {
        this.links.delete(key);
        held.link.destroy();
      }
    };
    return {
      destroy: release,
      pin: (path: string) => held.link.pin(path),
      unpin: () => held.link.unpin(),
      fd: () => held.link.fd(),
    };
  }
}
